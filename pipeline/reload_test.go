package pipeline_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// TestRunnerReload: a call that resolved its operation finishes under the
// declaration it started with; later calls see the new registry; an
// invalid registry changes nothing.
func TestRunnerReload(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	u := &rawUpstream{next: func(req idem.RawRequest) (idem.RawResponse, error) {
		close(started)
		<-release
		return createdWidget(req)
	}}
	f := newFixture(t, rawWidgetOps(u, false))
	done := make(chan idem.Result, 1)
	go func() { done <- f.do(context.Background(), rawCall("k-reload", `{"name":"a"}`)) }()
	<-started

	// The new declarations: only getWidgets.
	list := idem.DefineRaw(idem.Metadata{Name: "getWidgets", Method: "GET", Path: "/widgets", Summary: "List.", SideEffect: idem.SideEffectRead},
		idem.RawSpec{Handler: func(context.Context, *idem.Call, idem.RawRequest) (idem.RawResponse, error) {
			return idem.RawResponse{Status: http.StatusOK, Body: []byte(`[]`)}, nil
		}})
	reg, err := idem.NewRegistry(list)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.runner.Reload(reg); err != nil {
		t.Fatal(err)
	}
	expect(t, f.do(t.Context(), rawCall("k-new", `{"name":"b"}`)), 404, idem.CodeOperationNotFound)
	close(release)
	select {
	case r := <-done:
		if r.Status != 201 {
			t.Fatalf("the call in flight across the reload: %d %s", r.Status, r.Body())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight never finished")
	}
	if names := len(f.runner.Descriptors()); names != 1 {
		t.Fatalf("%d operations after the reload, want 1", names)
	}

	// A registry the runner refuses (a lease longer than the retention)
	// leaves the running one.
	slow := idem.DefineRaw(idem.Metadata{Name: "slowRead", Method: "GET", Path: "/slow", Summary: "Slow.", SideEffect: idem.SideEffectRead, Timeout: 48 * time.Hour},
		idem.RawSpec{Handler: func(context.Context, *idem.Call, idem.RawRequest) (idem.RawResponse, error) {
			return idem.RawResponse{Status: 200}, nil
		}})
	bad, err := idem.NewRegistry(slow)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.runner.Reload(bad); err == nil {
		t.Fatal("Reload accepted a lease longer than the retention")
	}
	if _, ok := f.runner.Describe("getWidgets"); !ok {
		t.Fatal("a refused reload changed the declarations")
	}
}

// TestReloadToAKindWithoutKeysKeepsReplays: a record made under
// same_key_replay keeps answering its key after a reload made the
// operation no_automatic_retry (issue 28, Low); a new key, or the old key
// with another intent, is refused as the new contract says, and nothing
// new is ever reserved under it.
func TestReloadToAKindWithoutKeysKeepsReplays(t *testing.T) {
	u := &rawUpstream{next: createdWidget}
	f := newFixture(t, rawWidgetOps(u, false))
	first := f.do(t.Context(), rawCall("k-old", `{"name":"a"}`))
	if first.Status != 201 {
		t.Fatalf("first call: %d %s", first.Status, first.Body())
	}
	ops := rawWidgetOps(u, false)
	m := ops[0].Metadata()
	m.Retry = idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: "No longer replays."}
	create := idem.DefineRaw(m, idem.RawSpec{
		Params:      []idem.Param{{Name: "shop", In: "path", Type: "string"}, {Name: "count", In: "query", Type: "integer"}, {Name: "name", In: "body"}},
		InputSchema: []byte(`{"type":"object","properties":{"shop":{"type":"string"},"count":{"type":"integer"},"name":{"type":"string"}},"required":["shop","name"]}`),
		Handler:     u.handle,
	})
	reg, err := idem.NewRegistry(create, ops[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := f.runner.Reload(reg); err != nil {
		t.Fatal(err)
	}
	again := f.do(t.Context(), rawCall("k-old", `{"name":"a"}`))
	if again.Status != 201 || !again.Replayed || again.Meta.ExecutionID != first.Meta.ExecutionID || u.calls.Load() != 1 {
		t.Fatalf("the same key after the reload: %d %s replayed=%v, handler calls %d; want the replay", again.Status, again.Body(), again.Replayed, u.calls.Load())
	}
	expect(t, f.do(t.Context(), rawCall("k-old", `{"name":"b"}`)), 400, idem.CodeIdempotencyKeyNotSupported)
	expect(t, f.do(t.Context(), rawCall("k-new", `{"name":"a"}`)), 400, idem.CodeIdempotencyKeyNotSupported)
	expect(t, f.do(t.Context(), rawCall("k-old", `{"nom":"a"}`)), 400, idem.CodeIdempotencyKeyNotSupported)
	if u.calls.Load() != 1 {
		t.Fatalf("the handler ran %d times", u.calls.Load())
	}
	if res := f.do(t.Context(), rawCall("", `{"name":"c"}`)); res.Status != 201 || u.calls.Load() != 2 {
		t.Fatalf("an unkeyed call: %d %s", res.Status, res.Body())
	}
}
