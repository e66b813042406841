package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// leaseOp is a keyed, idempotent write with one runtime retry; fn is its
// handler. Every call it receives is recorded with its context's
// deadline.
type leaseOp struct {
	mu        sync.Mutex
	calls     []idem.Call
	deadlines []time.Time
}

func (l *leaseOp) op(m idem.Metadata, fn func(ctx context.Context, call *idem.Call) error) idem.Operation {
	return idem.Define(m, func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		dl, _ := ctx.Deadline()
		l.mu.Lock()
		l.calls = append(l.calls, *call)
		l.deadlines = append(l.deadlines, dl)
		l.mu.Unlock()
		if err := fn(ctx, call); err != nil {
			return refundOut{}, err
		}
		return refundOut{Refunded: in.Amount}, nil
	})
}

func (l *leaseOp) seen() ([]idem.Call, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]idem.Call(nil), l.calls...), append([]time.Time(nil), l.deadlines...)
}

func leaseMeta() idem.Metadata {
	m := refundMeta()
	m.Approval = idem.ApprovalNone
	return m
}

// A runtime retry starts only while the lease is held by the store's
// clock: here the store's (fake) clock passes the lease during attempt 1,
// as it would for an instance paused there, so attempt 2 never runs, and
// the execution ends with a TIMEOUT saying so, its record indeterminate.
// The handler sees its reservation's fencing token and lease deadline.
func TestRetryNotStartedOnceStoreSaysLeasePassed(t *testing.T) {
	var l leaseOp
	m := leaseMeta() // timeout 1 s, one retry after 1 ms: lease 7.001 s with the 5 s grace
	lease := m.Lease(5 * time.Second)
	var f *fixture
	op := l.op(m, func(ctx context.Context, call *idem.Call) error {
		if call.RequestKey != "" {
			f.clock.Advance(lease) // the store's clock passes the lease
		}
		return idem.Retryable(errors.New("gateway hiccup"))
	})
	f = newFixture(t, []idem.Operation{op, showOp()})
	before := time.Now()
	resp := f.do(t.Context(), refundCall(100, "lease-1"))
	d := expect(t, resp, 504, idem.CodeTimeout)
	calls, _ := l.seen()
	if len(calls) != 1 || d.Meta.Attempts != 1 {
		t.Fatalf("handler ran %d times (meta.attempts %d); want only attempt 1: the lease passed before attempt 2", len(calls), d.Meta.Attempts)
	}
	if msg := string(resp.Body()); !strings.Contains(msg, "passed before attempt 2 could start") {
		t.Errorf("the answer does not say the lease passed before attempt 2: %s", msg)
	}
	if d.Retryable || d.Details["reconcile"] != "thing.show" {
		t.Errorf("a keyed TIMEOUT after the handler started must be final and name the reconcile read: %s", resp.Body())
	}
	a, err := f.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "lease-1"})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != idem.AttemptIndeterminate {
		t.Errorf("record = %s, want indeterminate", a.State)
	}
	if calls[0].FencingToken != a.FencingToken || calls[0].FencingToken == 0 {
		t.Errorf("Call.FencingToken = %d, the record's is %d", calls[0].FencingToken, a.FencingToken)
	}
	if dl := calls[0].LeaseDeadline; dl.IsZero() || dl.Before(before) || dl.After(time.Now().Add(lease)) {
		t.Errorf("Call.LeaseDeadline = %v, want within the lease of %s from the call", dl, lease)
	}
	if fence := calls[0].Fence(); fence.Scope != agent.Scope() || fence.Key != "lease-1" || fence.FencingToken != a.FencingToken {
		t.Errorf("Call.Fence() = %+v", fence)
	}
	x, err := f.runner.GetExecution(t.Context(), agent, d.Meta.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range x.Events {
		if ev.Type == idem.EventRetried {
			t.Errorf("execution.retried written for an attempt that never started: %+v", x.Events)
		}
	}

	// Unkeyed calls hold no lease: no fence, no deadline.
	resp = f.do(t.Context(), call{op: "order.refund", principal: browser, path: map[string]string{"id": "ord_1"}, body: map[string]int{"amount": 1}})
	calls, _ = l.seen()
	if last := calls[len(calls)-1]; last.FencingToken != 0 || !last.LeaseDeadline.IsZero() || last.RequestKey != "" {
		t.Errorf("unkeyed call: FencingToken %d, LeaseDeadline %v", last.FencingToken, last.LeaseDeadline)
	}
	if d := decode(t, resp); d.Meta.Attempts != 2 {
		t.Errorf("unkeyed call ran %d attempts, want 2 (its retry needs no lease): %s", d.Meta.Attempts, resp.Body())
	}
}

// The backoff before a retry ends at the lease (less its margin), and no
// attempt starts with the margin or less left, by the instance's own
// monotonic clock: attempt 1 times out, the backoff (500 ms to 1 s) would
// outlast what is left of the lease, so attempt 2 never runs.
func TestRetryNotStartedAfterLocalLease(t *testing.T) {
	var l leaseOp
	m := leaseMeta()
	m.Timeout, m.RuntimeRetry.BackoffMs = 100*time.Millisecond, 1000
	op := l.op(m, func(ctx context.Context, call *idem.Call) error {
		<-ctx.Done() // every attempt outlives its timeout
		return ctx.Err()
	})
	// Lease: 2 × 100 ms + 1 s of backoff + 1 ms of grace; margin 1 s.
	f := newFixture(t, []idem.Operation{op, showOp()}, func(c *pipeline.Config) { c.LeaseGrace = time.Millisecond })
	resp := f.do(t.Context(), refundCall(100, "lease-2"))
	d := expect(t, resp, 504, idem.CodeTimeout)
	calls, deadlines := l.seen()
	if len(calls) != 1 || d.Meta.Attempts != 1 {
		t.Fatalf("handler ran %d times (meta.attempts %d); want 1: attempt 2 would start past the lease", len(calls), d.Meta.Attempts)
	}
	if !strings.Contains(string(resp.Body()), "passed before attempt 2 could start") {
		t.Errorf("answer: %s", resp.Body())
	}
	if want := calls[0].LeaseDeadline.Add(-pipeline.DefaultLeaseMargin); deadlines[0].After(want) {
		t.Errorf("attempt 1's context ends at %v, after the lease deadline less the margin (%v)", deadlines[0], want)
	}
}

// The handler's context ends with the lease, whatever the timeout says:
// here the lease (10 s timeout + 1 ms grace) less a 9.9 s margin ends
// about 100 ms after the reservation, long before the 10 s timeout.
func TestHandlerContextEndsWithLease(t *testing.T) {
	var l leaseOp
	m := leaseMeta()
	m.Timeout, m.RuntimeRetry = 10*time.Second, idem.RuntimeRetry{}
	op := l.op(m, func(ctx context.Context, call *idem.Call) error {
		<-ctx.Done()
		return ctx.Err()
	})
	margin := 9900 * time.Millisecond
	f := newFixture(t, []idem.Operation{op, showOp()}, func(c *pipeline.Config) {
		c.LeaseGrace, c.LeaseMargin = time.Millisecond, margin
	})
	resp := f.do(t.Context(), refundCall(100, "lease-3"))
	expect(t, resp, 504, idem.CodeTimeout)
	calls, deadlines := l.seen()
	if len(calls) != 1 {
		t.Fatalf("handler ran %d times", len(calls))
	}
	if deadlines[0].IsZero() || deadlines[0].After(calls[0].LeaseDeadline) || deadlines[0].After(calls[0].LeaseDeadline.Add(-margin)) {
		t.Fatalf("handler ctx deadline %v is later than the lease deadline %v less the margin %s", deadlines[0], calls[0].LeaseDeadline, margin)
	}
	if !strings.Contains(string(resp.Body()), "reached the end of the lease") {
		t.Errorf("answer: %s", resp.Body())
	}
}

// A margin that leaves no room for an attempt, and a retention that does
// not outlive the leases, are refused by New, naming the field.
func TestRunnerRefusesLeaseConfigurations(t *testing.T) {
	reg, err := idem.NewRegistry(idem.Define(leaseMeta(), func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		return refundOut{}, nil
	}), showOp())
	if err != nil {
		t.Fatal(err)
	}
	store := newSQLiteStore(t, idem.SystemClock{})
	_, longest := reg.LongestLease(5 * time.Second) // thing.show's: 30 s timeout + 5 s
	for name, c := range map[string]struct {
		cfg  pipeline.Config
		want string
	}{
		"retention under the lease": {pipeline.Config{Retention: 2 * time.Second}, "pipeline: Config.Retention"},
		"retention at the lease":    {pipeline.Config{Retention: longest + time.Second}, "pipeline: Config.Retention"},
		"margin over the lease":     {pipeline.Config{LeaseMargin: time.Hour}, "pipeline: Config.LeaseMargin"},
	} {
		c.cfg.Store = store
		if _, err := pipeline.New(reg, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New error %v, want one naming %s", name, err, c.want)
		}
	}
	if _, err := pipeline.New(reg, pipeline.Config{Store: store, Retention: longest + time.Second + time.Microsecond}); err != nil {
		t.Errorf("retention just over lease plus margin: %v", err)
	}
}
