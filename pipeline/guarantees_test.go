package pipeline_test

// One named test per row of the guarantee table of SPEC §1, plus the
// runtime-retry, timeout, cancellation, policy and approval rules of §7
// and §8 they rest on.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
)

type amountIn struct {
	ID     string `json:"id" in:"path"`
	Amount int    `json:"amount" jsonschema:"minimum=1"`
}

type refundOut struct {
	Refunded int    `json:"refunded"`
	Key      string `json:"key"`
}

func refundMeta() idem.Metadata {
	return idem.Metadata{
		Name: "order.refund", Method: "POST", Path: "/v1/orders/{id}/refund", Summary: "Refund", SideEffect: idem.SideEffectWrite,
		Idempotent: true, RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 1, BackoffMs: 1}, Timeout: time.Second,
		Retry:    idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "thing.show"},
		Approval: idem.ApprovalPolicy,
	}
}

var overLimit = idem.PolicyFor("refund-limit", func(ctx context.Context, p idem.Principal, in amountIn) (idem.PolicyDecision, error) {
	if in.Amount > 5000 {
		return idem.PolicyDecision{Effect: idem.RequireApproval, Reason: "refunds over 5000 need approval"}, nil
	}
	return idem.PolicyDecision{Effect: idem.Allow}, nil
})

func refundOp(runs *atomic.Int64) idem.Operation {
	return idem.Define(refundMeta(), func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		runs.Add(1)
		return refundOut{Refunded: in.Amount, Key: call.IdempotencyKey}, nil
	}).WithPolicies(overLimit)
}

func refundCall(amount int, key string) call {
	return call{op: "order.refund", path: map[string]string{"id": "ord_1"}, body: map[string]int{"amount": amount}, key: key}
}

// Guarantee: at most one result finalization per execution. A handler
// that returns after its timeout has its result discarded; the execution
// ends once, as TIMEOUT.
func TestGuaranteeOneFinalizationPerExecution(t *testing.T) {
	late := make(chan struct{})
	m := idem.Metadata{Name: "slow.read", Method: "GET", Path: "/v1/slow", Summary: "s", SideEffect: idem.SideEffectRead, Timeout: 20 * time.Millisecond}
	op := idem.Define(m, func(ctx context.Context, call *idem.Call, in struct{}) (thing, error) {
		<-ctx.Done()
		defer close(late)
		return thing{ID: "LATE"}, nil // arrives after the deadline
	})
	f := newFixture(t, []idem.Operation{op, showOp()})
	resp := f.do(t.Context(), call{op: "slow.read", principal: approver})
	d := expect(t, resp, 504, idem.CodeTimeout)
	<-late
	if strings.Contains(string(resp.Body()), "LATE") {
		t.Fatal("a late handler result reached the answer")
	}
	x, err := f.runner.GetExecution(t.Context(), approver, d.Meta.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	finals := 0
	for _, e := range x.Events {
		if e.Type == idem.EventSucceeded || e.Type == idem.EventFailed {
			finals++
		}
	}
	if finals != 1 || x.Outcome != idem.OutcomeFailed || x.Code == nil || *x.Code != idem.CodeTimeout {
		t.Fatalf("execution = %+v (final events %d)", x, finals)
	}
}

// Guarantee: no runtime-initiated retry of write, destructive or external
// work without idempotent: true plus retry config.
func TestGuaranteeNoRuntimeRetryOfWritesWithoutOptIn(t *testing.T) {
	for _, effect := range []idem.SideEffect{idem.SideEffectWrite, idem.SideEffectDestructive, idem.SideEffectExternal} {
		m := createMeta()
		m.SideEffect, m.RuntimeRetry.MaxAttempts = effect, 2
		_, err := idem.NewRegistry(idem.Define(m, func(ctx context.Context, call *idem.Call, in createIn) (thing, error) { return thing{}, nil }), showOp())
		if err == nil || !strings.Contains(err.Error(), "idempotent: true") {
			t.Errorf("%s with retry config but no idempotent: registration = %v", effect, err)
		}
	}
	// Without retry config, a retryable failure of a write runs once.
	var runs atomic.Int64
	op := idem.Define(createMeta(), func(ctx context.Context, call *idem.Call, in createIn) (thing, error) {
		runs.Add(1)
		return thing{}, idem.Retryable(errors.New("transient"))
	})
	f := newFixture(t, []idem.Operation{op, showOp()})
	expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k"}), 500, idem.CodeExecutionFailed)
	if runs.Load() != 1 {
		t.Fatalf("a write without opt-in ran %d times", runs.Load())
	}
	// With opt-in, it is retried: once, as configured.
	runs.Store(0)
	m := refundMeta()
	m.Approval = idem.ApprovalNone
	retried := idem.Define(m, func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		if runs.Add(1) == 1 {
			return refundOut{}, idem.Retryable(errors.New("gateway hiccup"))
		}
		return refundOut{Refunded: in.Amount}, nil
	})
	f = newFixture(t, []idem.Operation{retried, showOp()})
	d := expect(t, f.do(t.Context(), refundCall(100, "r1")), 200, "")
	if runs.Load() != 2 || d.Meta.Attempts != 2 {
		t.Fatalf("opted-in write: runs %d, attempts %d; want 2 and 2", runs.Load(), d.Meta.Attempts)
	}
}

// A timed-out read with retry config really runs again under a fresh
// timer, in the same execution.
func TestTimedOutReadRetriesUnderFreshTimer(t *testing.T) {
	var mu sync.Mutex
	var seen []idem.Call
	var deadlines []time.Time
	m := idem.Metadata{Name: "flaky.read", Method: "GET", Path: "/v1/flaky", Summary: "s", SideEffect: idem.SideEffectRead,
		Timeout: 30 * time.Millisecond, RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 2, BackoffMs: 1}}
	op := idem.Define(m, func(ctx context.Context, call *idem.Call, in struct{}) (thing, error) {
		dl, _ := ctx.Deadline()
		mu.Lock()
		seen = append(seen, *call)
		deadlines = append(deadlines, dl)
		mu.Unlock()
		if call.Attempt == 1 {
			<-ctx.Done()
			return thing{}, ctx.Err()
		}
		return thing{ID: "ok"}, nil
	})
	f := newFixture(t, []idem.Operation{op, showOp()})
	d := expect(t, f.do(t.Context(), call{op: "flaky.read"}), 200, "")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || d.Meta.Attempts != 2 {
		t.Fatalf("attempts: handler saw %d, meta %d", len(seen), d.Meta.Attempts)
	}
	if seen[0].ExecutionID != seen[1].ExecutionID || seen[0].ExecutionID != d.Meta.ExecutionID || seen[1].Attempt != 2 {
		t.Fatalf("calls = %+v", seen)
	}
	if !deadlines[1].After(deadlines[0]) {
		t.Fatalf("the retry did not get a fresh timer: %v then %v", deadlines[0], deadlines[1])
	}
	x, _ := f.runner.GetExecution(t.Context(), agent, d.Meta.ExecutionID)
	if len(x.Events) != 3 || x.Events[1].Type != idem.EventRetried || x.Events[1].Attempt != 2 || x.Events[1].PreviousErrorCode != idem.CodeTimeout || x.Events[2].Attempts != 2 {
		t.Fatalf("events = %+v", x.Events)
	}
}

// The caller's cancellation spans the execution and is terminal: no retry,
// and a late result is not used.
func TestCancelledCallNeverRetries(t *testing.T) {
	var runs atomic.Int64
	started := make(chan struct{}, 4)
	m := refundMeta()
	m.Approval, m.Timeout = idem.ApprovalNone, time.Minute
	op := idem.Define(m, func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		runs.Add(1)
		started <- struct{}{}
		<-ctx.Done()
		return refundOut{Refunded: -1}, idem.Retryable(ctx.Err())
	})
	f := newFixture(t, []idem.Operation{op, showOp()})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-started; cancel() }()
	resp := f.do(ctx, refundCall(100, "c1"))
	d := expect(t, resp, 499, idem.CodeCancelled)
	if runs.Load() != 1 || d.Retryable || d.Details["reconcile"] != "thing.show" || strings.Contains(string(resp.Body()), "-1") {
		t.Fatalf("cancelled keyed call: runs %d, answer %s", runs.Load(), resp.Body())
	}
	// Cancelled after its handler started, a keyed execution is indeterminate.
	expect(t, f.do(t.Context(), refundCall(100, "c1")), 409, idem.CodeIdempotencyResultIndeterminate)
}

// A keyed call over a connection-bound surface (HTTP) outlives its
// connection once reserved: the same-key retry finds the result.
func TestKeyedCallDetachedFromConnection(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	f := newFixture(t, []idem.Operation{slowOp(release, &runs, time.Minute), showOp()})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan idem.Result, 1)
	go func() {
		done <- f.runner.Call(context.WithoutCancel(ctx), idem.Invocation{Operation: "slow.create", Principal: agent, Key: "d1", Connection: ctx, Intent: idem.Intent{Body: []byte(`{"name":"a"}`)}})
	}()
	waitFor(t, func() bool { return runs.Load() == 1 })
	cancel() // the client hangs up
	close(release)
	expect(t, <-done, 201, "")
	expect(t, f.do(t.Context(), call{op: "slow.create", body: `{"name":"a"}`, key: "d1"}), 201, "")
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

// An unkeyed call ends with its connection, whether the caller's context
// can be cancelled too (MCP: notifications/cancelled) or not (HTTP); and
// the explicit cancellation ends it whatever the connection does.
func TestUnkeyedCallEndsWithItsConnection(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	defer close(release)
	f := newFixture(t, []idem.Operation{slowOp(release, &runs, time.Minute), showOp()})
	for _, tc := range []struct {
		name     string
		explicit bool // the caller's context can be cancelled
		cancel   string
	}{
		{"uncancellable context, connection drops", false, "connection"},
		{"cancellable context, connection drops", true, "connection"},
		{"cancellable context, cancelled explicitly", true, "explicit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runs.Load()
			conn, drop := context.WithCancel(t.Context())
			defer drop()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var callCtx context.Context = ctx
			if !tc.explicit {
				callCtx = context.WithoutCancel(ctx)
			}
			done := make(chan idem.Result, 1)
			go func() {
				done <- f.runner.Call(callCtx, idem.Invocation{Operation: "slow.create", Principal: browser, Connection: conn, Intent: idem.Intent{Body: []byte(`{"name":"a"}`)}})
			}()
			waitFor(t, func() bool { return runs.Load() == before+1 })
			if tc.cancel == "connection" {
				drop()
			} else {
				cancel()
			}
			expect(t, <-done, idem.StatusClientClosedRequest, idem.CodeCancelled)
		})
	}
}

// Guarantee: a stable idempotency key for handlers, per execution.
func TestGuaranteeStableHandlerKey(t *testing.T) {
	var mu sync.Mutex
	keys := map[string][]string{} // execution id → keys seen per attempt
	m := refundMeta()
	m.Approval = idem.ApprovalNone
	op := idem.Define(m, func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		fromCtx, ok := idem.CallFromContext(ctx)
		if !ok || fromCtx.IdempotencyKey != call.IdempotencyKey {
			t.Error("the context does not carry the call")
		}
		mu.Lock()
		keys[call.ExecutionID] = append(keys[call.ExecutionID], call.IdempotencyKey)
		mu.Unlock()
		if call.Attempt == 1 {
			return refundOut{}, idem.Retryable(errors.New("again"))
		}
		return refundOut{Key: call.IdempotencyKey}, nil
	})
	f := newFixture(t, []idem.Operation{op, showOp()})
	first := expect(t, f.do(t.Context(), refundCall(1, "s1")), 200, "")
	replay := expect(t, f.do(t.Context(), refundCall(1, "s1")), 200, "")
	second := expect(t, f.do(t.Context(), refundCall(1, "s2")), 200, "")
	if string(replay.Data) != string(first.Data) {
		t.Fatal("the replay carries another handler key")
	}
	a, b := keys[first.Meta.ExecutionID], keys[second.Meta.ExecutionID]
	if len(a) != 2 || a[0] != a[1] || len(b) != 2 || b[0] == a[0] {
		t.Fatalf("handler keys: first execution %v, second %v", a, b)
	}
}

// Guarantee: runtime retries and new invocations are distinguishable in
// the audit log.
func TestGuaranteeRetriesDistinguishableFromReinvocations(t *testing.T) {
	m := refundMeta()
	m.Approval = idem.ApprovalNone
	op := idem.Define(m, func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		if call.Attempt == 1 {
			return refundOut{}, idem.Retryable(errors.New("again"))
		}
		return refundOut{Refunded: in.Amount}, nil
	})
	f := newFixture(t, []idem.Operation{op, showOp()})
	first := expect(t, f.do(t.Context(), refundCall(7, "a1")), 200, "")
	second := expect(t, f.do(t.Context(), refundCall(7, "a2")), 200, "") // the model called again
	x1, _ := f.runner.GetExecution(t.Context(), agent, first.Meta.ExecutionID)
	x2, _ := f.runner.GetExecution(t.Context(), agent, second.Meta.ExecutionID)
	if x1.ReinvocationOf != nil || x2.ReinvocationOf == nil || *x2.ReinvocationOf != x1.ID {
		t.Fatalf("reinvocationOf: first %v, second %v", x1.ReinvocationOf, x2.ReinvocationOf)
	}
	if x1.Attempts != 2 || x1.Events[1].Type != idem.EventRetried {
		t.Fatalf("the runtime retry is not in the first execution: %+v", x1)
	}
	for _, e := range append(x1.Events, x2.Events...) {
		if len(e.Data) > 0 && strings.Contains(strings.Join(mapValues(e.Data), ","), "amount") {
			t.Fatalf("an audit event carries raw input: %+v", e)
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestPolicies(t *testing.T) {
	policy := func(name string, effect idem.Effect, err error, delay time.Duration) idem.Policy {
		return idem.Policy{Name: name, Evaluate: func(ctx context.Context, in idem.PolicyInput) (idem.PolicyDecision, error) {
			if delay > 0 {
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return idem.PolicyDecision{}, ctx.Err()
				}
			}
			return idem.PolicyDecision{Effect: effect, Reason: name}, err
		}}
	}
	tests := []struct {
		name     string
		policies []idem.Policy
		status   int
		code     idem.Code
	}{
		{"all allow", []idem.Policy{policy("a", idem.Allow, nil, 0)}, 200, ""},
		{"deny beats require_approval", []idem.Policy{policy("r", idem.RequireApproval, nil, 0), policy("d", idem.Deny, nil, 0)}, 403, idem.CodePolicyDenied},
		{"require_approval beats allow", []idem.Policy{policy("a", idem.Allow, nil, 0), policy("r", idem.RequireApproval, nil, 0)}, 403, idem.CodeApprovalRequired},
		{"an error fails closed", []idem.Policy{policy("a", idem.Allow, nil, 0), policy("e", idem.Allow, errors.New("db down"), 0)}, 403, idem.CodePolicyFailed},
		{"a slow policy fails closed", []idem.Policy{policy("slow", idem.Allow, nil, time.Minute)}, 403, idem.CodePolicyFailed},
		{"an unknown effect fails closed", []idem.Policy{policy("x", "maybe", nil, 0)}, 403, idem.CodePolicyFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int64
			m := refundMeta()
			op := idem.Define(m, func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
				runs.Add(1)
				return refundOut{}, nil
			})
			f := newFixture(t, []idem.Operation{op, showOp()}, func(c *pipeline.Config) {
				c.Policies, c.PolicyTimeout = tt.policies, 50*time.Millisecond
			})
			d := expect(t, f.do(t.Context(), refundCall(1, "p1")), tt.status, tt.code)
			if tt.status >= 400 {
				if runs.Load() != 0 {
					t.Fatal("the handler ran")
				}
				if _, err := f.runner.GetAttempt(t.Context(), agent, "p1"); idem.ErrorCode(err) != idem.CodeNotFound {
					t.Fatalf("a refused call consumed its key: %v", err)
				}
			}
			if tt.code == idem.CodePolicyDenied && d.Details["reason"] != "d" {
				t.Fatalf("deny details = %v", d.Details)
			}
		})
	}
}

// The approval flow of SPEC §8, and the guarantee that an approval is
// consumed at most once.
func TestApprovalFlow(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{refundOp(&runs), showOp()})
	ctx := t.Context()
	d := expect(t, f.do(ctx, refundCall(6000, "big-1")), 403, idem.CodeApprovalRequired)
	id, _ := d.Details["approvalId"].(string)
	if id == "" || d.Details["reason"] != "refunds over 5000 need approval" {
		t.Fatalf("APPROVAL_REQUIRED details = %v", d.Details)
	}
	// Re-sending reuses the pending approval.
	again := expect(t, f.do(ctx, refundCall(6000, "big-1")), 403, idem.CodeApprovalRequired)
	if again.Details["approvalId"] != id {
		t.Fatalf("a second pending approval was opened: %v", again.Details)
	}
	// Who may decide, in SPEC order.
	if _, err := f.runner.DecideApproval(ctx, idem.Principal{Org: "globex", ID: "x", Roles: []string{idem.RoleApprover}}, id, true, ""); idem.ErrorCode(err) != idem.CodeApprovalNotFound {
		t.Fatalf("another org's approver: %v", err)
	}
	if _, err := f.runner.DecideApproval(ctx, browser, id, true, ""); idem.ErrorCode(err) != idem.CodeForbidden {
		t.Fatalf("a non-approver: %v", err)
	}
	selfApprover := agent
	selfApprover.Roles = []string{idem.RoleApprover}
	if _, err := f.runner.DecideApproval(ctx, selfApprover, id, true, ""); idem.ErrorCode(err) != idem.CodeSelfApprovalForbidden {
		t.Fatalf("the requester: %v", err)
	}
	if _, err := f.runner.GetApproval(ctx, agent2, id); idem.ErrorCode(err) != idem.CodeApprovalNotFound {
		t.Fatalf("another agent sees the approval: %v", err)
	}
	a, err := f.runner.DecideApproval(ctx, approver, id, true, "ok")
	if err != nil || a.Status != idem.ApprovalApproved {
		t.Fatalf("approve = %+v, %v", a, err)
	}
	ran := expect(t, f.do(ctx, refundCall(6000, "big-1")), 200, "")
	if runs.Load() != 1 {
		t.Fatalf("runs = %d", runs.Load())
	}
	// The same key again is a replay, never a second approval request.
	replay := expect(t, f.do(ctx, refundCall(6000, "big-1")), 200, "")
	if !replay.Meta.Idempotency.Replayed || replay.Meta.ExecutionID != ran.Meta.ExecutionID {
		t.Fatalf("replay = %+v", replay.Meta)
	}
	a, _ = f.runner.GetApproval(ctx, agent, id)
	if a.Status != idem.ApprovalConsumed || a.ExecutionID == nil || *a.ExecutionID != ran.Meta.ExecutionID {
		t.Fatalf("approval after use = %+v", a)
	}
	// The same intent under a new key needs a new approval.
	fresh := expect(t, f.do(ctx, refundCall(6000, "big-2")), 403, idem.CodeApprovalRequired)
	if fresh.Details["approvalId"] == id {
		t.Fatal("a consumed approval authorized another execution")
	}
	// A rejection answers APPROVAL_REJECTED with the decider's reason.
	if _, err := f.runner.DecideApproval(ctx, approver, fresh.Details["approvalId"].(string), false, "too much"); err != nil {
		t.Fatal(err)
	}
	rej := expect(t, f.do(ctx, refundCall(6000, "big-2")), 403, idem.CodeApprovalRejected)
	if rej.Details["reason"] != "too much" {
		t.Fatalf("rejection details = %v", rej.Details)
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d", runs.Load())
	}
	list, err := f.runner.ListApprovals(ctx, agent2, "")
	if err != nil || len(list) != 0 {
		t.Fatalf("agent-2 lists %d approvals of agent-1", len(list))
	}
	if list, _ := f.runner.ListApprovals(ctx, approver, ""); len(list) != 2 {
		t.Fatalf("the approver lists %d approvals, want 2", len(list))
	}
}

// Guarantee: an approval is consumed at most once, across all instances
// sharing a store: 64 concurrent same-intent calls (each with its own key)
// on two runners sharing PostgreSQL run exactly one execution.
func TestGuaranteeApprovalConsumedOnceAcrossInstances(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	stores := newPGStores(t, clock, 2)
	var runs atomic.Int64
	fixtures := []*fixture{
		newFixtureOn(t, clock, stores[0], []idem.Operation{refundOp(&runs), showOp()}),
		newFixtureOn(t, clock, stores[1], []idem.Operation{refundOp(&runs), showOp()}),
	}
	d := expect(t, fixtures[0].do(t.Context(), refundCall(9000, "first")), 403, idem.CodeApprovalRequired)
	if _, err := fixtures[1].runner.DecideApproval(t.Context(), approver, d.Details["approvalId"].(string), true, ""); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]idem.Code, 64)
	statuses := make([]int, 64)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := fixtures[i%2].do(context.Background(), refundCall(9000, "race-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
			statuses[i] = resp.Status
			if resp.Problem != nil {
				codes[i] = resp.Problem.Code
			}
		}()
	}
	wg.Wait()
	ok := 0
	for i, s := range statuses {
		switch {
		case s == 200:
			ok++
		case codes[i] != idem.CodeApprovalRequired:
			t.Fatalf("call %d answered %d %s", i, s, codes[i])
		}
	}
	if ok != 1 || runs.Load() != 1 {
		t.Fatalf("one approval authorized %d executions (%d handler runs), want exactly 1", ok, runs.Load())
	}
}

// Guarantee: a keyed request's handler runs at most once per (scope, key),
// across instances.
func TestGuaranteeKeyedHandlerAtMostOnceAcrossInstances(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	stores := newPGStores(t, clock, 2)
	var runs atomic.Int64
	fixtures := []*fixture{
		newFixtureOn(t, clock, stores[0], []idem.Operation{createOp(&runs), showOp()}),
		newFixtureOn(t, clock, stores[1], []idem.Operation{createOp(&runs), showOp()}),
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := fixtures[i%2].do(context.Background(), call{op: "thing.create", body: `{"name":"a"}`, key: "one"})
			if resp.Status != 201 && resp.Status != 409 {
				t.Errorf("answer %d %s", resp.Status, resp.Body())
			}
		}()
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times for one key", runs.Load())
	}
}
