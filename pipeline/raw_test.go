package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/canonical"
	"github.com/idem-run/idem/internal/fakeclock"
)

// rawUpstream is a raw operation's handler standing in for an upstream:
// each call answers what next says, and counts.
type rawUpstream struct {
	calls atomic.Int64
	next  func(req idem.RawRequest) (idem.RawResponse, error)
	seen  atomic.Pointer[idem.RawRequest]
}

func (u *rawUpstream) handle(_ context.Context, _ *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
	u.calls.Add(1)
	u.seen.Store(&req)
	return u.next(req)
}

// rawWidgetOps declares createWidget (same_key_replay, POST
// /widgets/{shop}, integer query parameter count, a body with a required
// string name) and getWidgets, its reconcile read.
func rawWidgetOps(u *rawUpstream, unvalidated bool) []idem.Operation {
	create := idem.DefineRaw(idem.Metadata{
		Name: "createWidget", Method: "POST", Path: "/widgets/{shop}", Summary: "Create a widget.",
		SideEffect: idem.SideEffectWrite,
		Retry:      idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "getWidgets", Rationale: "Replays by key."},
	}, idem.RawSpec{
		Params: []idem.Param{{Name: "shop", In: "path", Type: "string"}, {Name: "count", In: "query", Type: "integer"}, {Name: "name", In: "body"}},
		InputSchema: []byte(`{"type":"object","properties":{"shop":{"type":"string"},"count":{"type":"integer","minimum":1},
			"name":{"type":"string"}},"required":["shop","name"],"additionalProperties":false}`),
		Unvalidated: unvalidated,
		Handler:     u.handle,
	})
	list := idem.DefineRaw(idem.Metadata{
		Name: "getWidgets", Method: "GET", Path: "/widgets", Summary: "List widgets.", SideEffect: idem.SideEffectRead,
	}, idem.RawSpec{Handler: u.handle})
	return []idem.Operation{create, list}
}

func createdWidget(req idem.RawRequest) (idem.RawResponse, error) {
	return idem.RawResponse{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/widgets/w1"}, "X-Upstream": {"yes"}},
		Body: []byte(`{"id": "w1",  "spaced": true}`)}, nil
}

func rawCall(key string, body string) call {
	return call{op: "createWidget", path: map[string]string{"shop": "s1"}, body: body, key: key}
}

func TestRawOperationReplaysTheUpstreamAnswerByteForByte(t *testing.T) {
	u := &rawUpstream{next: createdWidget}
	f := newFixture(t, rawWidgetOps(u, false))
	first := f.do(t.Context(), rawCall("k-1", `{"name":"a"}`))
	if first.Status != 201 || string(first.Body()) != `{"id": "w1",  "spaced": true}` || !first.Raw {
		t.Fatalf("first answer %d %q raw=%v", first.Status, first.Body(), first.Raw)
	}
	exe := first.Meta.ExecutionID
	if !strings.HasPrefix(exe, "exe_") || first.Header.Get("X-Upstream") != "yes" || first.Replayed {
		t.Fatalf("first answer headers %v", first.Header)
	}
	if got := u.seen.Load(); got.Path != "/widgets/s1" || got.Method != "POST" || string(got.Body) != `{"name":"a"}` {
		t.Fatalf("the handler saw %+v", got)
	}
	// The same intent, spelled differently, replays: same status, body,
	// replayable headers, execution; never the other headers.
	again := f.do(t.Context(), rawCall("k-1", `{ "name" : "a" }`))
	if again.Status != 201 || !bytes.Equal(again.Body(), first.Body()) || !again.Replayed {
		t.Fatalf("replay %d %q replayed=%v", again.Status, again.Body(), again.Replayed)
	}
	if !again.Replayed || again.Meta.ExecutionID != exe ||
		again.Header.Get("Location") != "/widgets/w1" || again.Header.Get("X-Upstream") != "" {
		t.Fatalf("replay headers %v", again.Header)
	}
	if n := u.calls.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
	expect(t, f.do(t.Context(), rawCall("k-1", `{"name":"b"}`)), 422, idem.CodeIdempotencyKeyReused)
}

func TestRawOperationValidatesItsFlatArguments(t *testing.T) {
	u := &rawUpstream{next: createdWidget}
	f := newFixture(t, rawWidgetOps(u, false))
	for name, c := range map[string]call{
		"missing name":  rawCall("k-v1", `{}`),
		"unknown field": rawCall("k-v2", `{"name":"a","colour":"red"}`),
		"query type":    {op: "createWidget", path: map[string]string{"shop": "s1"}, query: map[string][]string{"count": {"two"}}, body: `{"name":"a"}`, key: "k-v3"},
		"query minimum": {op: "createWidget", path: map[string]string{"shop": "s1"}, query: map[string][]string{"count": {"0"}}, body: `{"name":"a"}`, key: "k-v4"},
		"unknown query": {op: "createWidget", path: map[string]string{"shop": "s1"}, query: map[string][]string{"x": {"1"}}, body: `{"name":"a"}`, key: "k-v5"},
		"2^53+1":        rawCall("k-v6", `{"name":"a","n":9007199254740993}`),
		"NUL":           {op: "createWidget", path: map[string]string{"shop": "s\x00"}, body: `{"name":"a"}`, key: "k-v7"},
	} {
		t.Run(name, func(t *testing.T) {
			expect(t, f.do(t.Context(), c), 400, idem.CodeInvalidInput)
		})
	}
	if n := u.calls.Load(); n != 0 {
		t.Fatalf("the upstream ran %d times on invalid input", n)
	}
	// Unvalidated forwards what the schema would refuse.
	u2 := &rawUpstream{next: createdWidget}
	g := newFixture(t, rawWidgetOps(u2, true))
	if r := g.do(t.Context(), rawCall("k-u", `{"colour":"red"}`)); r.Status != 201 || u2.calls.Load() != 1 {
		t.Fatalf("unvalidated: %d %s, %d calls", r.Status, r.Body(), u2.calls.Load())
	}
}

func TestRawOperationFingerprintsOpaqueBodiesByteForByte(t *testing.T) {
	u := &rawUpstream{next: createdWidget}
	f := newFixture(t, rawWidgetOps(u, true))
	send := func(key, ct, body string) idem.Result {
		return f.runner.Call(t.Context(), idem.Invocation{
			Operation: "createWidget",
			Principal: agent,
			Key:       key,
			Intent:    idem.Intent{PathParams: map[string]string{"shop": "s1"}, Body: []byte(body), ContentType: ct, Passthrough: http.Header{"Content-Type": {ct}}},
		})
	}
	if r := send("k-o", "text/plain", "not json"); r.Status != 201 {
		t.Fatalf("opaque body: %d %s", r.Status, r.Body())
	}
	if r := send("k-o", "text/plain; charset=utf-8", "not json"); !r.Replayed {
		t.Fatalf("the same bytes and media type: %d %s, want a replay", r.Status, r.Body())
	}
	expect(t, send("k-o", "text/plain", "not json!"), 422, idem.CodeIdempotencyKeyReused)
	expect(t, send("k-o", "application/octet-stream", "not json"), 422, idem.CodeIdempotencyKeyReused)
	if n := u.calls.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
}

func TestRawOperationUpstream5xxIsIndeterminate(t *testing.T) {
	u := &rawUpstream{next: func(idem.RawRequest) (idem.RawResponse, error) {
		return idem.RawResponse{Status: 502, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("bad gateway")}, nil
	}}
	f := newFixture(t, rawWidgetOps(u, false))
	first := f.do(t.Context(), rawCall("k-5", `{"name":"a"}`))
	if first.Status != 502 || string(first.Body()) != "bad gateway" {
		t.Fatalf("first answer %d %q", first.Status, first.Body())
	}
	d := expect(t, f.do(t.Context(), rawCall("k-5", `{"name":"a"}`)), 409, idem.CodeIdempotencyResultIndeterminate)
	if d.Details["reconcile"] != "getWidgets" || u.calls.Load() != 1 {
		t.Fatalf("details %v, %d upstream calls", d.Details, u.calls.Load())
	}
}

func TestRawOperationNotDispatchedFreesTheKey(t *testing.T) {
	onEachStore(t, func(t *testing.T, s rawStore) {
		{
			down := atomic.Bool{}
			down.Store(true)
			u := &rawUpstream{next: func(req idem.RawRequest) (idem.RawResponse, error) {
				if down.Load() {
					return idem.RawResponse{}, idem.NotDispatched(idem.Errorf(idem.CodeUpstreamUnavailable, "connection refused"))
				}
				return createdWidget(req)
			}}
			f := newFixtureOn(t, s.clock, s.store, rawWidgetOps(u, false))
			r := f.do(t.Context(), rawCall("k-d", `{"name":"a"}`))
			d := expect(t, r, 503, idem.CodeUpstreamUnavailable)
			if !d.Retryable || d.Details["reconcile"] != nil || !strings.HasPrefix(d.Meta.ExecutionID, "exe_") {
				t.Fatalf("not dispatched: %+v", d)
			}
			if _, err := f.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "k-d"}); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("the record after a release: %v, want NOT_FOUND", err)
			}
			x, err := f.runner.GetExecution(t.Context(), agent, d.Meta.ExecutionID)
			if err != nil || x.Outcome != idem.OutcomeFailed || x.Code == nil || *x.Code != idem.CodeUpstreamUnavailable {
				t.Fatalf("the released execution: %+v, %v", x, err)
			}
			down.Store(false)
			if r := f.do(t.Context(), rawCall("k-d", `{"name":"a"}`)); r.Status != 201 || r.Replayed {
				t.Fatalf("the same key after the release: %d %s replayed=%v", r.Status, r.Body(), r.Replayed)
			}
			if n := u.calls.Load(); n != 2 {
				t.Fatalf("the upstream ran %d times", n)
			}
		}
	})
}

type rawStore struct {
	name  string
	store idem.Store
	clock *fakeclock.Clock
}

// onEachStore runs test on a fresh SQLite store and on a fresh
// PostgreSQL one (skipped when no test database is configured), each with
// its own fake clock.
func onEachStore(t *testing.T, test func(t *testing.T, s rawStore)) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	t.Run("sqlite", func(t *testing.T) {
		c := fakeclock.New(start)
		test(t, rawStore{"sqlite", newSQLiteStore(t, c), c})
	})
	t.Run("pg", func(t *testing.T) {
		c := fakeclock.New(start)
		test(t, rawStore{"pg", newPGStores(t, c, 1)[0], c})
	})
}

// An approved call whose handler never dispatched it (NotDispatched) does
// not spend its approval: the same call, sent again once the upstream is
// back, runs with the same approval, keyed (the key is released) and
// unkeyed (SPEC §8, issue 33 item 6).
func TestNotDispatchedKeepsTheApproval(t *testing.T) {
	onEachStore(t, func(t *testing.T, s rawStore) {
		down := atomic.Bool{}
		down.Store(true)
		u := &rawUpstream{next: func(req idem.RawRequest) (idem.RawResponse, error) {
			if down.Load() {
				return idem.RawResponse{}, idem.NotDispatched(idem.Errorf(idem.CodeUpstreamUnavailable, "connection refused"))
			}
			return createdWidget(req)
		}}
		spec := idem.RawSpec{Params: []idem.Param{{Name: "name", In: "body"}}, Handler: u.handle}
		approved := func(name, path string, retry idem.RetryContract) idem.Operation {
			retry.Rationale = "Sends once."
			return idem.DefineRaw(idem.Metadata{
				Name: name, Method: "POST", Path: path, Summary: "Send a widget.", SideEffect: idem.SideEffectWrite,
				Approval: idem.ApprovalAlways, Retry: retry,
			}, spec)
		}
		ops := append(rawWidgetOps(u, false)[1:],
			approved("sendKeyed", "/widgets/keyed", idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "getWidgets"}),
			approved("sendWidget", "/widgets/send", idem.RetryContract{Kind: idem.RetryNoAutomaticRetry}))
		f := newFixtureOn(t, s.clock, s.store, ops)
		for _, c := range []call{{op: "sendKeyed", body: `{"name":"a"}`, key: "k-a"}, {op: "sendWidget", body: `{"name":"b"}`}} {
			down.Store(true)
			d := expect(t, f.do(t.Context(), c), http.StatusForbidden, idem.CodeApprovalRequired)
			id := d.Details["approvalId"].(string)
			if _, err := f.runner.DecideApproval(t.Context(), approver, id, true, ""); err != nil {
				t.Fatal(err)
			}
			expect(t, f.do(t.Context(), c), http.StatusServiceUnavailable, idem.CodeUpstreamUnavailable)
			a, err := f.store.GetApproval(t.Context(), idem.GetApprovalParams{Org: "acme", ID: id})
			if err != nil || a.Status != idem.ApprovalApproved {
				t.Fatalf("%s: the approval after a call that never ran = %+v, %v; want it approved still", c.op, a, err)
			}
			down.Store(false)
			if r := f.do(t.Context(), c); r.Status != http.StatusCreated {
				t.Fatalf("%s: the same call once the upstream is back = %d %s; want it run with its approval", c.op, r.Status, r.Body())
			}
			if a, _ := f.store.GetApproval(t.Context(), idem.GetApprovalParams{Org: "acme", ID: id}); a.Status != idem.ApprovalConsumed {
				t.Fatalf("%s: the approval after the call ran = %s, want consumed", c.op, a.Status)
			}
		}
	})
}

// A keyed proxied call made before the upgrade that added the upstream
// to the fingerprint's preimage (its record holds the version-1
// fingerprint and no version, as that release wrote it) is replayed by
// the same call after it, and another intent under its key is still a
// reuse (SPEC §6.2, issue 33 item 5).
func TestRecordMadeBeforeThePreimageChangedStillReplays(t *testing.T) {
	onEachStore(t, func(t *testing.T, s rawStore) {
		u := &rawUpstream{next: createdWidget}
		ops := rawWidgetOps(u, false)
		proxied := idem.DefineRaw(idem.Metadata{
			Name: "createWidget", Method: "POST", Path: "/widgets/{shop}", Summary: "Create a widget.", SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "getWidgets", Rationale: "Replays by key."},
		}, idem.RawSpec{Params: []idem.Param{{Name: "shop", In: "path", Type: "string"}, {Name: "name", In: "body"}},
			Target: "https://upstream.example/api", Handler: u.handle})
		f := newFixtureOn(t, s.clock, s.store, []idem.Operation{proxied, ops[1]})

		// The record as the release before wrote it: the preimage without
		// the target, no version.
		old, err := canonical.Fingerprint(canonical.Request{Method: "POST", Path: "/widgets/s1", Body: []byte(`{"name":"a"}`)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.store.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_before_upgrade", Scope: agent.Scope(), Operation: "createWidget", Fingerprint: old},
			Key:         "k-old", Lease: time.Minute, Retention: 24 * time.Hour,
		})
		if err != nil || !res.Reserved || res.Attempt.FingerprintVersion != 0 {
			t.Fatalf("reserve the old record: %+v, %v", res, err)
		}
		if _, err := s.store.Complete(t.Context(), idem.CompleteParams{Scope: agent.Scope(), Key: "k-old", FencingToken: res.Attempt.FencingToken,
			Status: 201, Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"w0"}`),
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}); err != nil {
			t.Fatal(err)
		}

		r := f.do(t.Context(), rawCall("k-old", `{ "name": "a" }`))
		if r.Status != 201 || !r.Replayed || string(r.Body()) != `{"id":"w0"}` || u.calls.Load() != 0 {
			t.Fatalf("the same call after the upgrade = %d %s (replayed %v, %d upstream calls); want the old record replayed",
				r.Status, r.Body(), r.Replayed, u.calls.Load())
		}
		expect(t, f.do(t.Context(), rawCall("k-old", `{"name":"b"}`)), 422, idem.CodeIdempotencyKeyReused)

		// A record made now keeps the version it was made with.
		if r := f.do(t.Context(), rawCall("k-new", `{"name":"a"}`)); r.Status != 201 || r.Replayed {
			t.Fatalf("a new key = %d %s", r.Status, r.Body())
		}
		a, err := s.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "k-new"})
		if err != nil || a.FingerprintVersion != canonical.FingerprintVersion || a.Fingerprint == old {
			t.Fatalf("the new record = version %d, fingerprint %s (old %s), %v", a.FingerprintVersion, a.Fingerprint, old, err)
		}
	})
}
