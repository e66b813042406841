package pipeline_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

var (
	agent    = idem.Principal{Org: "acme", ID: "agent-1", Kind: idem.KindAgent}
	agent2   = idem.Principal{Org: "acme", ID: "agent-2", Kind: idem.KindAgent}
	browser  = idem.Principal{Org: "acme", ID: "alice", Kind: idem.KindBrowser}
	approver = idem.Principal{Org: "acme", ID: "bob", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}}
)

// The test applications' business codes, registered the way an application
// registers its own.
const (
	// codeThingExists: thing.create (and the stress writes) of a name
	// that exists.
	codeThingExists idem.Code = "THING_EXISTS"
	// codeAlreadyDone: job.run's declared error.
	codeAlreadyDone idem.Code = "ALREADY_DONE"
)

func init() {
	idem.RegisterCodes(map[idem.Code]idem.CodeInfo{
		codeThingExists: {Status: 409, Title: "Thing exists", Action: "Choose another name, or show the thing."},
		codeAlreadyDone: {Status: 409, Title: "Already done", Action: "Show the job."},
	})
}

// fixture is a runner on a real store with a fake clock.
type fixture struct {
	t      *testing.T
	runner *pipeline.Runner
	store  idem.Store
	clock  *fakeclock.Clock
}

// watchedStore reports GetAttempt calls on gets once armed, so that a test
// can tell when a waiter is polling.
type watchedStore struct {
	idem.Store
	armed atomic.Bool
	gets  chan struct{}
}

func (s *watchedStore) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	a, err := s.Store.GetAttempt(ctx, p)
	if s.armed.Load() {
		s.gets <- struct{}{}
	}
	return a, err
}

// newSQLiteStore opens a store on a fresh SQLite file.
func newSQLiteStore(t testing.TB, clock idem.Clock) idem.Store {
	t.Helper()
	s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newPGStores opens n store instances (own pools) on one fresh database.
func newPGStores(t testing.TB, clock idem.Clock, n int) []idem.Store {
	t.Helper()
	url := pgtest.NewDatabase(t)
	var out []idem.Store
	for range n {
		s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

func newFixture(t *testing.T, ops []idem.Operation, configure ...func(*pipeline.Config)) *fixture {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	return newFixtureOn(t, clock, newSQLiteStore(t, clock), ops, configure...)
}

func newFixtureOn(t *testing.T, clock *fakeclock.Clock, store idem.Store, ops []idem.Operation, configure ...func(*pipeline.Config)) *fixture {
	t.Helper()
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.Config{Store: store, Clock: clock, Sealer: box, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, c := range configure {
		c(&cfg)
	}
	r, err := pipeline.New(reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, runner: r, store: store, clock: clock}
}

// call builds a request; body is marshalled unless it is a string or nil.
type call struct {
	op        string
	principal idem.Principal
	path      map[string]string
	query     url.Values
	body      any
	key       string
	// keyHeader, when set, is the Idempotency-Key header's values as an
	// HTTP caller sends them (key is ignored then).
	keyHeader []string
	wait      time.Duration
}

// do calls the runner as the HTTP surface would: the control inputs (the
// dryRun query parameter, the key header) are read by httpapi.ParseControls.
func (f *fixture) do(ctx context.Context, c call) idem.Result {
	f.t.Helper()
	inv := idem.Invocation{Operation: c.op, Principal: c.principal, Wait: c.wait, Intent: idem.Intent{PathParams: c.path, Query: c.query}}
	if inv.Principal.ID == "" {
		inv.Principal = agent
	}
	switch b := c.body.(type) {
	case nil:
	case string:
		inv.Intent.Body = []byte(b)
	default:
		inv.Intent.Body, _ = json.Marshal(b)
	}
	header := http.Header{idem.HeaderIdempotencyKey: c.keyHeader}
	if c.key != "" && c.keyHeader == nil {
		header.Set(idem.HeaderIdempotencyKey, c.key)
	}
	if d, ok := f.runner.Describe(c.op); ok {
		var err error
		inv.Key, inv.DryRun, inv.Intent.Query, err = httpapi.ParseControls(d.Retry, c.query, header)
		if err != nil {
			return idem.ErrorResult(err, &idem.Meta{Operation: c.op})
		}
	}
	return f.runner.Call(ctx, inv)
}

// decoded is a response body read generically.
type decoded struct {
	Data      json.RawMessage `json:"data"`
	Code      idem.Code       `json:"code"`
	Retryable bool            `json:"retryable"`
	Details   map[string]any  `json:"details"`
	Meta      struct {
		Operation   string `json:"operation"`
		ExecutionID string `json:"executionId"`
		Attempts    int    `json:"attempts"`
		DryRun      bool   `json:"dryRun"`
		Idempotency *struct {
			Key      string `json:"key"`
			Replayed bool   `json:"replayed"`
		} `json:"idempotency"`
	} `json:"meta"`
}

func decode(t *testing.T, r idem.Result) decoded {
	t.Helper()
	var d decoded
	if err := json.Unmarshal(r.Body(), &d); err != nil {
		t.Fatalf("response body %q: %v", r.Body(), err)
	}
	checkTyped(t, r)
	return d
}

// checkTyped checks that r's typed fields are its body: the fields render
// the same bytes, and the body parses back to the same fields.
func checkTyped(t *testing.T, r idem.Result) {
	t.Helper()
	if (r.Problem != nil) != (r.Status >= 400) || (r.Problem != nil && (r.Problem.Meta != r.Meta || r.Data != nil)) {
		t.Fatalf("status %d with problem %+v, data %s", r.Status, r.Problem, r.Data)
	}
	fields := idem.Result{Status: r.Status, Data: r.Data, Problem: r.Problem, Meta: r.Meta}
	if !bytes.Equal(fields.Body(), r.Body()) {
		t.Fatalf("the fields render\n%s\nthe body is\n%s", fields.Body(), r.Body())
	}
	p, err := idem.ParseResult(r.Status, r.Header, r.Body())
	if err != nil {
		t.Fatalf("ParseResult of %s: %v", r.Body(), err)
	}
	if !bytes.Equal(p.Data, r.Data) || p.Replayed != r.Replayed || !bytes.Equal(p.Body(), r.Body()) || idem.ErrorCode(p.Err()) != idem.ErrorCode(r.Err()) {
		t.Fatalf("ParseResult gives %+v, the runner %+v", p, r)
	}
	pm, _ := json.Marshal(p.Meta)
	rm, _ := json.Marshal(r.Meta)
	if !bytes.Equal(pm, rm) {
		t.Fatalf("parsed meta %s, typed %s", pm, rm)
	}
}

// expect checks status and code of a response and returns its body.
func expect(t *testing.T, r idem.Result, status int, code idem.Code) decoded {
	t.Helper()
	d := decode(t, r)
	if r.Status != status || d.Code != code {
		t.Fatalf("got %d %s, want %d %s; body %s", r.Status, d.Code, status, code, r.Body())
	}
	return d
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
