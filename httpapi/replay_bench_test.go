package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

// BenchmarkHTTPCall measures one call through the HTTP surface and the
// runner, in process (no network): a replay of a completed key (answered
// from the replay cache) and an unkeyed read, with allocations.
func BenchmarkHTTPCall(b *testing.B) {
	op := idem.Define(idem.Metadata{
		Name: "widget.create", Method: "POST", Path: "/v1/shops/{slug}/widgets", Summary: "Create a widget", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "widget.show", Rationale: "r"}, SuccessStatus: 201,
	}, func(ctx context.Context, call *idem.Call, in widgetIn) (widget, error) {
		call.Header().Set("Location", "/v1/shops/"+in.Slug+"/widgets/"+in.Name)
		return widget{Slug: in.Slug, Name: in.Name}, nil
	})
	show := idem.Define(idem.Metadata{
		Name: "widget.show", Method: "GET", Path: "/v1/shops/{slug}", Summary: "Show", SideEffect: idem.SideEffectRead,
		Retry: idem.RetryContract{Kind: idem.RetryFreshRead, Rationale: "r"},
	}, func(ctx context.Context, call *idem.Call, in slugIn) (widget, error) {
		return widget{Slug: in.Slug}, nil
	})
	reg, err := idem.NewRegistry(op, show)
	if err != nil {
		b.Fatal(err)
	}
	store, err := sqlitestore.Open(b.Context(), filepath.Join(b.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	auth := httpapi.NewTokens(map[string]idem.Principal{"t": {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	h := httpapi.NewHandler(httpapi.Config{Runner: runner, Store: store, Auth: auth, Logger: quiet, Version: "test", MaxBodyBytes: 4096})
	send := func(method, path, key, body string) int {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	if c := send("POST", "/v1/shops/s1/widgets", "k-1", `{"name":"a"}`); c != http.StatusCreated {
		b.Fatalf("first: %d", c)
	}
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c := send("POST", "/v1/shops/s1/widgets", "k-1", `{"name":"a"}`); c != http.StatusCreated {
				b.Fatalf("replay: %d", c)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c := send("GET", "/v1/shops/s1", "", ""); c != http.StatusOK {
				b.Fatalf("read: %d", c)
			}
		}
	})
}
