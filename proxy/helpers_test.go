package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

var agent = idem.Principal{Org: "acme", ID: "agent-1", Kind: idem.KindAgent}

// loadDoc loads an OpenAPI document written inline (YAML or JSON).
func loadDoc(t *testing.T, text string) *proxy.Document {
	t.Helper()
	path := filepath.Join(t.TempDir(), "openapi.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return loadFile(t, path)
}

func loadFile(t *testing.T, path string) *proxy.Document {
	t.Helper()
	doc, err := proxy.Load(t.Context(), path, nil, nil)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return doc
}

// recorder is a stand-in upstream for Build: every operation's handler
// records the request it got and answers 200 {}.
type recorder struct {
	mu   sync.Mutex
	seen map[string][]idem.RawRequest
}

func (r *recorder) forward(op proxy.Operation) idem.RawHandler {
	return func(_ context.Context, _ *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen == nil {
			r.seen = map[string][]idem.RawRequest{}
		}
		r.seen[op.Name] = append(r.seen[op.Name], req)
		return idem.RawResponse{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)}, nil
	}
}

func (r *recorder) calls(name string) []idem.RawRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]idem.RawRequest(nil), r.seen[name]...)
}

// noForward is an Options.Forward for tests that never call.
func noForward(proxy.Operation) idem.RawHandler {
	return func(context.Context, *idem.Call, idem.RawRequest) (idem.RawResponse, error) {
		return idem.RawResponse{Status: 200}, nil
	}
}

// newRunner registers ops and runs them on a fresh SQLite store.
func newRunner(t testing.TB, ops []idem.Operation) *pipeline.Runner {
	t.Helper()
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: store, Clock: clock, Sealer: box,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// buildRunner builds doc with the recorder as upstream and returns a
// runner on the operations.
func buildRunner(t testing.TB, doc *proxy.Document, overlay proxy.Overlay) (*pipeline.Runner, *proxy.Built, *recorder) {
	t.Helper()
	rec := &recorder{}
	built, err := proxy.Build(doc, overlay, proxy.Options{Forward: rec.forward})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return newRunner(t, built.Operations), built, rec
}

// problemOf decodes a problem answer: its code and details.errors.
type problem struct {
	Code    idem.Code `json:"code"`
	Details struct {
		Errors []struct {
			Path    string `json:"path"`
			Message string `json:"message"`
		} `json:"errors"`
	} `json:"details"`
}

func problemOf(t *testing.T, r idem.Result) problem {
	t.Helper()
	var p problem
	if err := json.Unmarshal(r.Body(), &p); err != nil {
		t.Fatalf("answer %d %q: %v", r.Status, r.Body(), err)
	}
	return p
}

// errorPaths are the paths of details.errors.
func (p problem) errorPaths() []string {
	var out []string
	for _, e := range p.Details.Errors {
		out = append(out, e.Path)
	}
	return out
}

// operation finds a built operation's metadata by name.
func metadataOf(t *testing.T, built *proxy.Built, name string) idem.Metadata {
	t.Helper()
	for _, op := range built.Operations {
		if m := op.Metadata(); m.Name == name {
			return m.WithDefaults()
		}
	}
	t.Fatalf("no operation %q", name)
	return idem.Metadata{}
}

func proxiedOf(t *testing.T, built *proxy.Built, name string) proxy.Operation {
	t.Helper()
	for _, p := range built.Proxied {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no proxied operation %q", name)
	return proxy.Operation{}
}

// containsAll reports which of want s lacks.
func missing(s string, want ...string) []string {
	var out []string
	for _, w := range want {
		if !strings.Contains(s, w) {
			out = append(out, w)
		}
	}
	return out
}
