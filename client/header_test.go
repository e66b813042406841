package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

// TestCallSendsHeaderArguments: against a real server, a header argument
// of a flat call travels as its header (the catalog's x-idem-header), so
// the handler sees it, and a same-key retry is the same intent.
func TestCallSendsHeaderArguments(t *testing.T) {
	type noteIn struct {
		Tenant string `json:"tenant" in:"header" header:"X-Tenant"`
		Text   string `json:"text"`
	}
	add := idem.Define(idem.Metadata{
		Name: "note.add", Method: "POST", Path: "/v1/notes", Summary: "Add a note", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "note.list", Rationale: "r"},
	}, func(ctx context.Context, call *idem.Call, in noteIn) (noteIn, error) { return in, nil })
	list := idem.Define(idem.Metadata{Name: "note.list", Method: "GET", Path: "/v1/notes", Summary: "List notes", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in struct{}) ([]noteIn, error) { return []noteIn{}, nil })
	reg, err := idem.NewRegistry(add, list)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	auth := httpapi.NewTokens(map[string]idem.Principal{"tok": {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	ts := httptest.NewServer(httpapi.NewHandler(httpapi.Config{Runner: runner, Store: store, Auth: auth, Logger: slog.New(slog.DiscardHandler), Version: "test"}))
	t.Cleanup(ts.Close)
	c, err := New(ts.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]json.RawMessage{"tenant": json.RawMessage(`"acme"`), "text": json.RawMessage(`"hi"`)}
	for i, wantReplayed := range []bool{false, true} {
		res, err := c.Call(t.Context(), "note.add", args, CallOptions{IdempotencyKey: "k-1"})
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		var got noteIn
		if err := json.Unmarshal(res.Envelope.Data, &got); err != nil || got != (noteIn{Tenant: "acme", Text: "hi"}) {
			t.Fatalf("call %d: the handler saw %s (%v)", i+1, res.Envelope.Data, err)
		}
		if replayed := res.Envelope.Meta.Idempotency != nil && res.Envelope.Meta.Idempotency.Replayed; replayed != wantReplayed {
			t.Fatalf("call %d: replayed = %v", i+1, replayed)
		}
	}
}
