package demo

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

// testEnv is the demo on a real store, called through a real Runner.
type testEnv struct {
	app    *App
	runner *pipeline.Runner
	store  idem.Store
}

// stores are the two databases every demo test runs on.
var stores = map[string]func(t *testing.T) string{
	"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "idem.db") },
	"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
}

// forEachStore runs fn on SQLite and on PostgreSQL.
func forEachStore(t *testing.T, fn func(t *testing.T, e *testEnv)) {
	for name, url := range stores {
		t.Run(name, func(t *testing.T) { fn(t, newTestEnv(t, url(t), Config{WebhookLoopback: true})) })
	}
}

func newTestEnv(t *testing.T, storeURL string, cfg Config) *testEnv {
	t.Helper()
	ctx := context.Background()
	var store idem.Store
	var err error
	if path, ok := cutPrefix(storeURL, "sqlite:"); ok {
		store, err = sqlitestore.Open(ctx, path, idem.StoreConfig{Clock: cfg.Clock})
	} else {
		store, err = pgstore.Open(ctx, storeURL, idem.StoreConfig{Clock: cfg.Clock})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, _ := secretbox.New(key)
	if cfg.Sealer == nil {
		cfg.Sealer = box
	}
	app, err := Open(ctx, storeURL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	reg, err := idem.NewRegistry(app.Operations()...)
	if err != nil {
		t.Fatal(err)
	}
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Clock: cfg.Clock, Sealer: box, Policies: app.Policies(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{app: app, runner: runner, store: store}
}

// queryRow reads one row of the demo's tables into dest.
func (e *testEnv) queryRow(t *testing.T, q string, args []any, dest ...any) error {
	t.Helper()
	return e.app.db.InTx(t.Context(), func(tx *Tx) error { return tx.QueryRow(t.Context(), q, args...).Scan(dest...) })
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

// req is one call in a demo test.
type req struct {
	token string // a demo token; demo-agent when empty
	op    string
	path  map[string]string
	query url.Values
	body  string
	key   string
}

// result is a decoded answer.
type result struct {
	Status int
	Raw    []byte
	Data   json.RawMessage
	Code   idem.Code
	Detail map[string]any
	Meta   struct {
		ExecutionID string `json:"executionId"`
		Attempts    int    `json:"attempts"`
		DryRun      bool   `json:"dryRun"`
		Idempotency *struct {
			Replayed bool `json:"replayed"`
		} `json:"idempotency"`
	}
}

func (e *testEnv) call(t *testing.T, r req) result {
	t.Helper()
	token := r.token
	if token == "" {
		token = "demo-agent"
	}
	p, ok := Tokens()[token]
	if !ok {
		t.Fatalf("unknown demo token %q", token)
	}
	return e.callAs(t, context.Background(), p, r)
}

// must checks status and code and returns the result.
func (r result) must(t *testing.T, status int, code idem.Code) result {
	t.Helper()
	if r.Status != status || r.Code != code {
		t.Fatalf("got %d %s, want %d %s: %s", r.Status, r.Code, status, code, r.Raw)
	}
	return r
}

// into decodes the data of a success.
func (r result) into(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Data, v); err != nil {
		t.Fatalf("data %s: %v", r.Data, err)
	}
}

func TestOpenTwiceIsHarmless(t *testing.T) {
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			u := url(t)
			newTestEnv(t, u, Config{})
			newTestEnv(t, u, Config{})
		})
	}
}
