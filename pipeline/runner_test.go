package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
)

type createIn struct {
	Name string `json:"name" jsonschema:"minLength=1"`
}

type thing struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type showIn struct {
	ID string `json:"id" in:"path"`
}

func showOp() idem.Operation {
	return idem.Define(idem.Metadata{Name: "thing.show", Method: "GET", Path: "/v1/things/{id}", Summary: "Show a thing", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in showIn) (thing, error) { return thing{ID: in.ID}, nil })
}

func createMeta() idem.Metadata {
	return idem.Metadata{
		Name: "thing.create", Method: "POST", Path: "/v1/things", Summary: "Create a thing", SideEffect: idem.SideEffectWrite,
		Retry:         idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "thing.show", Rationale: "creates once per key"},
		SuccessStatus: http.StatusCreated,
		Errors:        []idem.DeclaredError{{Code: codeThingExists, Status: 409, Message: "exists"}},
	}
}

// createOp counts handler runs; the name "taken" is a declared 409.
func createOp(runs *atomic.Int64) idem.Operation {
	return idem.Define(createMeta(), func(ctx context.Context, call *idem.Call, in createIn) (thing, error) {
		runs.Add(1)
		if in.Name == "taken" {
			return thing{}, idem.Errorf(codeThingExists, "a thing named %q exists", in.Name)
		}
		if in.Name == "boom" {
			return thing{}, errors.New("database exploded")
		}
		call.Header().Set("Location", "/v1/things/"+in.Name)
		return thing{ID: "t_" + in.Name, Name: in.Name}, nil
	})
}

func TestReplayOfCompletedKey(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	first := f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"})
	d1 := expect(t, first, 201, "")
	if d1.Meta.Idempotency == nil || d1.Meta.Idempotency.Key != "k1" || d1.Meta.Idempotency.Replayed || d1.Meta.ExecutionID == "" || d1.Meta.Attempts != 1 {
		t.Fatalf("first answer meta = %+v", d1.Meta)
	}
	if first.Header.Get("Location") != "/v1/things/a" || first.Replayed {
		t.Fatalf("first headers = %v", first.Header)
	}
	// The same intent, byte-equivalent after canonicalization.
	again := f.do(t.Context(), call{op: "thing.create", body: `{ "name" : "a" }`, key: `"k1"`})
	d2 := expect(t, again, 201, "")
	if !again.Replayed || again.Header.Get("Location") != "/v1/things/a" {
		t.Fatalf("replay headers = %v", again.Header)
	}
	if !d2.Meta.Idempotency.Replayed || d2.Meta.ExecutionID != d1.Meta.ExecutionID || string(d2.Data) != string(d1.Data) {
		t.Fatalf("replay = %s, first = %s", again.Body(), first.Body())
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
	x, err := f.runner.GetExecution(t.Context(), agent, d1.Meta.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	types := []string{}
	for _, e := range x.Events {
		types = append(types, e.Type)
	}
	if strings.Join(types, ",") != "execution.started,execution.succeeded,execution.replayed" {
		t.Fatalf("audit events = %v", types)
	}
	// Another principal's same key is its own attempt.
	other := f.do(t.Context(), call{op: "thing.create", principal: agent2, body: `{"name":"a"}`, key: "k1"})
	if other.Replayed || runs.Load() != 2 {
		t.Fatalf("agent-2's same key replayed agent-1's result (runs %d)", runs.Load())
	}
}

func TestKeyReuseForAnotherIntent(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}), 201, "")
	d := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"b"}`, key: "k1"}), 422, idem.CodeIdempotencyKeyReused)
	if d.Meta.Idempotency == nil || d.Meta.Idempotency.Replayed || d.Meta.Operation != "thing.create" {
		t.Fatalf("422 meta = %+v", d.Meta)
	}
	// One key names one request across endpoints: the same key on a read is ignored (fresh_read).
	expect(t, f.do(t.Context(), call{op: "thing.show", path: map[string]string{"id": "x"}, key: "k1"}), 200, "")
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

func TestContractChecksInOrder(t *testing.T) {
	var runs atomic.Int64
	bind := idem.Define(idem.Metadata{
		Name: "thing.bind", Method: "PUT", Path: "/v1/things/{id}/bind", Summary: "Bind", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryConvergent, Reconcile: "thing.show", Preview: true},
	}, func(ctx context.Context, call *idem.Call, in showIn) (thing, error) {
		runs.Add(1)
		return thing{ID: in.ID}, nil
	}).
		WithPreview(func(ctx context.Context, call *idem.Call, in showIn) (any, error) {
			return map[string]any{"wouldBind": in.ID, "dryRun": call.DryRun}, nil
		})
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp(), bind})
	dry := url.Values{"dryRun": {"true"}}
	tests := []struct {
		name      string
		c         call
		headers   []string
		status    int
		code      idem.Code
		principal idem.Principal
	}{
		{"malformed key", call{op: "thing.create", body: `{"name":"a"}`}, []string{"a b"}, 400, idem.CodeIdempotencyKeyInvalid, agent},
		{"repeated key", call{op: "thing.create", body: `{"name":"a"}`}, []string{"a", "a"}, 400, idem.CodeIdempotencyKeyInvalid, agent},
		{"malformed key beats dry run", call{op: "thing.bind", path: map[string]string{"id": "x"}, query: dry}, []string{"a b"}, 400, idem.CodeIdempotencyKeyInvalid, agent},
		{"key with dry run", call{op: "thing.bind", path: map[string]string{"id": "x"}, query: dry}, []string{"k"}, 400, idem.CodeIdempotencyKeyNotSupported, agent},
		{"key with dry run beats no preview", call{op: "thing.create", body: `{"name":"a"}`, query: dry}, []string{"k"}, 400, idem.CodeIdempotencyKeyNotSupported, agent},
		{"dry run without preview", call{op: "thing.create", body: `{"name":"a"}`, query: dry}, nil, 400, idem.CodeDryRunNotSupported, agent},
		{"key on convergent", call{op: "thing.bind", path: map[string]string{"id": "x"}}, []string{"k"}, 400, idem.CodeIdempotencyKeyNotSupported, agent},
		{"no key from an agent", call{op: "thing.create", body: `{"name":"a"}`}, nil, 400, idem.CodeIdempotencyKeyRequired, agent},
		{"no key from a browser runs", call{op: "thing.create", body: `{"name":"a"}`}, nil, 201, "", browser},
		{"malformed key ignored on fresh_read", call{op: "thing.show", path: map[string]string{"id": "x"}}, []string{"a b", "c"}, 200, "", agent},
		{"dry run on preview", call{op: "thing.bind", path: map[string]string{"id": "x"}, query: dry}, nil, 200, "", agent},
		{"invalid input", call{op: "thing.create", body: `{"name":""}`}, []string{"k-invalid"}, 400, idem.CodeInvalidInput, agent},
		{"unknown field", call{op: "thing.create", body: `{"name":"a","x":1}`}, []string{"k-invalid"}, 400, idem.CodeInvalidInput, agent},
		{"not an object", call{op: "thing.create", body: `[1]`}, []string{"k-invalid"}, 400, idem.CodeInvalidInput, agent},
		{"unknown operation", call{op: "thing.nope"}, nil, 404, idem.CodeOperationNotFound, agent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := runs.Load()
			c := tt.c
			c.principal, c.keyHeader = tt.principal, tt.headers
			resp := f.do(t.Context(), c)
			d := expect(t, resp, tt.status, tt.code)
			if tt.status >= 400 && runs.Load() != before {
				t.Fatal("a rejected call ran the handler")
			}
			if tt.name == "dry run on preview" && (!d.Meta.DryRun || !strings.Contains(string(d.Data), `"dryRun":true`) || runs.Load() != before) {
				t.Fatalf("dry run = %s (live runs %d→%d)", resp.Body(), before, runs.Load())
			}
		})
	}
	// A rejection in stages 2–7 never consumes the key.
	if _, err := f.runner.GetAttempt(t.Context(), agent, "k-invalid"); idem.ErrorCode(err) != idem.CodeNotFound {
		t.Fatalf("an invalid input consumed its key: %v", err)
	}
	expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k-invalid"}), 201, "")
}

func TestInvalidInputDetails(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	d := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"","extra":true}`, key: "k"}), 400, idem.CodeInvalidInput)
	errs, _ := d.Details["errors"].([]any)
	if len(errs) != 2 {
		t.Fatalf("details.errors = %v, want two entries", d.Details["errors"])
	}
	for _, e := range errs {
		m := e.(map[string]any)
		if m["path"] == nil || m["message"] == "" {
			t.Fatalf("error entry %v lacks path or message", m)
		}
	}
}

func TestDeclaredErrorIsStoredAndReplayed(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	first := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"taken"}`, key: "k"}), 409, codeThingExists)
	if first.Meta.Idempotency == nil || first.Meta.Idempotency.Replayed || first.Meta.ExecutionID == "" {
		t.Fatalf("first 409 meta = %+v", first.Meta)
	}
	again := f.do(t.Context(), call{op: "thing.create", body: `{"name":"taken"}`, key: "k"})
	second := expect(t, again, 409, codeThingExists)
	if !second.Meta.Idempotency.Replayed || second.Meta.ExecutionID != first.Meta.ExecutionID || again.Problem == nil || !again.Replayed {
		t.Fatalf("replayed 409 = %s %v", again.Body(), again.Header)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

func TestServerErrorIsIndeterminateNeverRerun(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	d := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"boom"}`, key: "k"}), 500, idem.CodeExecutionFailed)
	if d.Retryable || d.Details["reconcile"] != "thing.show" || d.Meta.ExecutionID == "" || d.Meta.Attempts != 1 {
		t.Fatalf("keyed 500 = %+v", d)
	}
	if strings.Contains(string(f.do(t.Context(), call{op: "thing.create", body: `{"name":"boom"}`, key: "k"}).Body()), "exploded") {
		t.Fatal("the handler's internal error leaked to the caller")
	}
	again := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"boom"}`, key: "k"}), 409, idem.CodeIdempotencyResultIndeterminate)
	if again.Details["reconcile"] != "thing.show" || again.Retryable {
		t.Fatalf("indeterminate answer = %+v", again)
	}
	if runs.Load() != 1 {
		t.Fatalf("an indeterminate attempt ran %d times", runs.Load())
	}
	v, err := f.runner.GetAttempt(t.Context(), agent, "k")
	if err != nil || v.State != idem.AttemptIndeterminate || v.Status == nil || *v.Status != 500 {
		t.Fatalf("attempt = %+v, %v", v, err)
	}
}

// slowOp blocks until release is closed or its context ends.
func slowOp(release <-chan struct{}, runs *atomic.Int64, timeout time.Duration) idem.Operation {
	m := createMeta()
	m.Name, m.Path, m.Timeout = "slow.create", "/v1/slow", timeout
	return idem.Define(m, func(ctx context.Context, call *idem.Call, in createIn) (thing, error) {
		runs.Add(1)
		select {
		case <-release:
			return thing{ID: call.IdempotencyKey, Name: in.Name}, nil
		case <-ctx.Done():
			return thing{}, ctx.Err()
		}
	})
}

func TestInFlightAndPreferWait(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	watched := &watchedStore{Store: newSQLiteStore(t, clock), gets: make(chan struct{}, 64)}
	f := newFixtureOn(t, clock, watched, []idem.Operation{slowOp(release, &runs, time.Minute), showOp()})
	done := make(chan idem.Result, 1)
	go func() { done <- f.do(context.Background(), call{op: "slow.create", body: `{"name":"a"}`, key: "k"}) }()
	waitFor(t, func() bool {
		v, err := f.runner.GetAttempt(t.Context(), agent, "k")
		return err == nil && v.State == idem.AttemptInFlight
	})
	busy := f.do(t.Context(), call{op: "slow.create", body: `{"name":"a"}`, key: "k"})
	d := expect(t, busy, 409, idem.CodeIdempotencyKeyInFlight)
	if !d.Retryable || busy.Problem.Code.RetryAfter() == 0 || busy.WaitApplied != 0 || d.Meta.Idempotency == nil {
		t.Fatalf("in-flight answer = %s %v", busy.Body(), busy.Header)
	}
	waiter := make(chan idem.Result, 1)
	watched.armed.Store(true)
	gets := watched.gets
	go func() {
		waiter <- f.do(context.Background(), call{op: "slow.create", body: `{"name":"a"}`, key: "k", wait: 45 * time.Second})
	}()
	<-gets // stage 5 found the record in flight
	<-gets // the waiter polls it: it is waiting
	close(release)
	first := <-done
	waited := <-waiter
	expect(t, first, 201, "")
	w := expect(t, waited, 201, "")
	if !waited.Replayed || !w.Meta.Idempotency.Replayed || waited.WaitApplied != 30*time.Second {
		t.Fatalf("Prefer: wait answer = %s %v", waited.Body(), waited.Header)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

// waitFor polls cond (real time, bounded) for states the test cannot
// drive directly, such as another goroutine reaching its handler.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached in 10 s")
}

func TestSecretReplayAndExpiry(t *testing.T) {
	var runs atomic.Int64
	mint := idem.Define(idem.Metadata{
		Name: "token.mint", Method: "POST", Path: "/v1/tokens", Summary: "Mint", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Enforcement: idem.EnforceTransactionalSecretReplay, Reconcile: "thing.show"},
	}, func(ctx context.Context, call *idem.Call, in createIn) (map[string]string, error) {
		runs.Add(1)
		return map[string]string{"secret": fmt.Sprintf("sk_%d_%s", runs.Load(), in.Name)}, nil
	})
	f := newFixture(t, []idem.Operation{mint, showOp()}, func(c *pipeline.Config) { c.SecretWindow = 10 * time.Minute })
	d, _ := f.runner.Describe("token.mint")
	if d.Retry.SecretReplayWindowMs != 600000 {
		t.Fatalf("secret window in the catalog = %d", d.Retry.SecretReplayWindowMs)
	}
	first := expect(t, f.do(t.Context(), call{op: "token.mint", body: `{"name":"a"}`, key: "m1"}), 200, "")
	a, err := f.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "m1"})
	if err != nil || a.SealedKeyID == "" || strings.Contains(string(a.Body), "sk_1") {
		t.Fatalf("stored record = %+v, %v; want a sealed body without the secret", a, err)
	}
	f.clock.Advance(10*time.Minute - time.Second)
	again := expect(t, f.do(t.Context(), call{op: "token.mint", body: `{"name":"a"}`, key: "m1"}), 200, "")
	if string(again.Data) != string(first.Data) || !again.Meta.Idempotency.Replayed {
		t.Fatalf("replay in window = %s, first %s", again.Data, first.Data)
	}
	f.clock.Advance(time.Second)
	gone := expect(t, f.do(t.Context(), call{op: "token.mint", body: `{"name":"a"}`, key: "m1"}), 410, idem.CodeIdempotencyResultExpired)
	if gone.Details["reconcile"] != "thing.show" {
		t.Fatalf("410 details = %v", gone.Details)
	}
	if runs.Load() != 1 {
		t.Fatalf("mint ran %d times", runs.Load())
	}
}

func TestRegistrationRules(t *testing.T) {
	noop := func(ctx context.Context, call *idem.Call, in createIn) (thing, error) { return thing{}, nil }
	read := func(name, path string) idem.Operation {
		return idem.Define(idem.Metadata{Name: name, Method: "GET", Path: path, Summary: "s", SideEffect: idem.SideEffectRead},
			func(ctx context.Context, call *idem.Call, in struct{}) (thing, error) { return thing{}, nil })
	}
	tests := []struct {
		name string
		ops  func() []idem.Operation
		rule string
	}{
		{"runtime retry on a write without idempotent", func() []idem.Operation {
			m := createMeta()
			m.RuntimeRetry.MaxAttempts = 1
			return []idem.Operation{idem.Define(m, noop), showOp()}
		}, "needs idempotent: true"},
		{"same_key_replay on a read", func() []idem.Operation {
			m := createMeta()
			m.SideEffect = idem.SideEffectRead
			return []idem.Operation{idem.Define(m, noop), showOp()}
		}, "only writing operations"},
		{"fresh_read on a write", func() []idem.Operation {
			m := createMeta()
			m.Retry = idem.RetryContract{Kind: idem.RetryFreshRead}
			return []idem.Operation{idem.Define(m, noop)}
		}, "never a fresh read"},
		{"preview without implementation", func() []idem.Operation {
			m := createMeta()
			m.Retry.Preview = true
			return []idem.Operation{idem.Define(m, noop), showOp()}
		}, "no preview handler"},
		{"reconcile names nothing", func() []idem.Operation {
			return []idem.Operation{idem.Define(createMeta(), noop)}
		}, "not a registered operation"},
		{"reconcile names a write", func() []idem.Operation {
			m := createMeta()
			m.Retry.Reconcile = "thing.create"
			return []idem.Operation{idem.Define(m, noop)}
		}, "not a read operation"},
		{"duplicate name", func() []idem.Operation {
			return []idem.Operation{showOp(), showOp()}
		}, "declared twice"},
		{"duplicate route", func() []idem.Operation {
			other := idem.Define(idem.Metadata{Name: "b.show", Method: "get", Path: "/v1/things/{id}", Summary: "s", SideEffect: idem.SideEffectRead},
				func(ctx context.Context, call *idem.Call, in showIn) (thing, error) { return thing{}, nil })
			return []idem.Operation{showOp(), other}
		}, "already operation"},
		{"path parameter without a field", func() []idem.Operation {
			return []idem.Operation{read("a.show", "/v1/x/{id}")}
		}, "no field \"id\""},
		{"reserved argument", func() []idem.Operation {
			return []idem.Operation{idem.Define(idem.Metadata{Name: "a.show", Method: "GET", Path: "/v1/a", Summary: "s", SideEffect: idem.SideEffectRead},
				func(ctx context.Context, call *idem.Call, in struct {
					DryRun bool `json:"dryRun"`
				}) (thing, error) {
					return thing{}, nil
				})}
		}, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := idem.NewRegistry(tt.ops()...)
			if err == nil || !strings.Contains(err.Error(), tt.rule) || !strings.Contains(err.Error(), "operation \"") {
				t.Fatalf("NewRegistry = %v, want an error naming the operation and %q", err, tt.rule)
			}
		})
	}
}

func TestKeyedHandlerRunsOnceUnderConcurrency(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	var wg sync.WaitGroup
	statuses := make([]int, 64)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = f.do(context.Background(), call{op: "thing.create", body: `{"name":"a"}`, key: "contended"}).Status
		}()
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("64 same-key calls ran the handler %d times", runs.Load())
	}
	for _, s := range statuses {
		if s != 201 && s != 409 {
			t.Fatalf("statuses = %v", statuses)
		}
	}
}

// Waiters on an in-flight key are bounded (Config.MaxWaiters): one beyond
// the bound is answered at once, without the preference (no
// WaitApplied), while the one within it waits for the replay (issue 28,
// item 3: 600 waiters held 976 MiB of bodies).
func TestWaitersAreBounded(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	watched := &watchedStore{Store: newSQLiteStore(t, clock), gets: make(chan struct{}, 64)}
	f := newFixtureOn(t, clock, watched, []idem.Operation{slowOp(release, &runs, time.Minute), showOp()}, func(c *pipeline.Config) { c.MaxWaiters = 1 })
	body := `{"name":"a"}`
	done := make(chan idem.Result, 1)
	go func() { done <- f.do(context.Background(), call{op: "slow.create", body: body, key: "k"}) }()
	waitFor(t, func() bool {
		v, err := f.runner.GetAttempt(t.Context(), agent, "k")
		return err == nil && v.State == idem.AttemptInFlight
	})
	watched.armed.Store(true)
	waiting := make(chan idem.Result, 1)
	go func() {
		waiting <- f.do(context.Background(), call{op: "slow.create", body: body, key: "k", wait: 30 * time.Second})
	}()
	<-watched.gets // stage 5 found the record in flight
	<-watched.gets // the waiter polls it: it holds the one place
	watched.armed.Store(false)
	beyond := f.do(t.Context(), call{op: "slow.create", body: body, key: "k", wait: 30 * time.Second})
	expect(t, beyond, 409, idem.CodeIdempotencyKeyInFlight)
	if beyond.WaitApplied != 0 {
		t.Fatalf("the waiter beyond the bound waited %s", beyond.WaitApplied)
	}
	close(release)
	expect(t, <-done, 201, "")
	w := <-waiting
	expect(t, w, 201, "")
	if !w.Replayed || w.WaitApplied == 0 {
		t.Fatalf("the waiter within the bound: replayed %v, waited %s", w.Replayed, w.WaitApplied)
	}
}
