package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

// raceStore runs another request at a chosen point of one request's
// pipeline, so that a race between same-key requests is deterministic.
type raceStore struct {
	idem.Store
	// afterMiss, when set, runs once, after a GetAttempt that found no
	// record: the other request runs between stage 5 and the gate.
	afterMiss atomic.Pointer[func()]
	// beforeReserve, when set, runs once before a Reserve, and the Reserve
	// then fails as if the approval had been consumed since the gate.
	beforeReserve atomic.Pointer[func()]
}

func (s *raceStore) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	a, err := s.Store.GetAttempt(ctx, p)
	if errors.Is(err, idem.ErrNotFound) {
		if run := s.afterMiss.Swap(nil); run != nil {
			(*run)()
		}
	}
	return a, err
}

func (s *raceStore) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	if run := s.beforeReserve.Swap(nil); run != nil {
		(*run)()
		return idem.ReserveResult{}, idem.ErrApprovalNotConsumable
	}
	return s.Store.Reserve(ctx, p)
}

// Issue 15, item 3: same-key requests racing the execution an approval
// authorized answer as stage 5 does (replay, 409 in flight, 422 reuse),
// never 403 APPROVAL_REQUIRED with a new pending approval.
func TestApprovalRaceAnswersAsStageFive(t *testing.T) {
	stores := map[string]func(t *testing.T, clock *fakeclock.Clock) idem.Store{
		"sqlite":   func(t *testing.T, clock *fakeclock.Clock) idem.Store { return newSQLiteStore(t, clock) },
		"postgres": func(t *testing.T, clock *fakeclock.Clock) idem.Store { return newPGStores(t, clock, 1)[0] },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Run("completed meanwhile: replay", func(t *testing.T) {
				f, s, runs, _ := raceFixture(t, open)
				approve(t, f, 6000, "k-done")
				var first idem.Result
				s.afterMiss.Store(ptr(func() { first = f.do(context.Background(), refundCall(6000, "k-done")) }))
				second := f.do(t.Context(), refundCall(6000, "k-done"))
				d1 := expect(t, first, 200, "")
				d2 := expect(t, second, 200, "")
				if !second.Replayed || d2.Meta.ExecutionID != d1.Meta.ExecutionID || runs.Load() != 1 {
					t.Fatalf("second = %s (runs %d), want the replay of %s", second.Body(), runs.Load(), d1.Meta.ExecutionID)
				}
				noNewApproval(t, f)
			})
			t.Run("in flight meanwhile: 409", func(t *testing.T) {
				f, s, runs, hold := raceFixture(t, open)
				approve(t, f, 7000, "k-running")
				done := make(chan idem.Result, 1)
				s.afterMiss.Store(ptr(func() {
					go func() { done <- f.do(context.Background(), refundCall(7000, "k-running")) }()
					select { // running, or answered without running
					case <-hold.started:
					case r := <-done:
						done <- r
					}
				}))
				second := f.do(t.Context(), refundCall(7000, "k-running"))
				close(hold.release)
				expect(t, second, 409, idem.CodeIdempotencyKeyInFlight)
				expect(t, <-done, 200, "")
				if runs.Load() != 1 {
					t.Fatalf("runs = %d", runs.Load())
				}
				noNewApproval(t, f)
			})
			t.Run("another intent meanwhile: 422", func(t *testing.T) {
				f, s, runs, _ := raceFixture(t, open)
				approve(t, f, 6000, "k-other")
				s.afterMiss.Store(ptr(func() { expect(t, f.do(context.Background(), refundCall(6000, "k-other")), 200, "") }))
				expect(t, f.do(t.Context(), refundCall(8000, "k-other")), 422, idem.CodeIdempotencyKeyReused)
				if runs.Load() != 1 {
					t.Fatalf("runs = %d", runs.Load())
				}
				noNewApproval(t, f)
			})
			t.Run("approval consumed before the reservation: replay", func(t *testing.T) {
				f, s, runs, _ := raceFixture(t, open)
				approve(t, f, 6000, "k-late")
				var first idem.Result
				s.beforeReserve.Store(ptr(func() { first = f.do(context.Background(), refundCall(6000, "k-late")) }))
				second := f.do(t.Context(), refundCall(6000, "k-late"))
				d1 := expect(t, first, 200, "")
				if d2 := expect(t, second, 200, ""); !second.Replayed || d2.Meta.ExecutionID != d1.Meta.ExecutionID || runs.Load() != 1 {
					t.Fatalf("second = %s (runs %d)", second.Body(), runs.Load())
				}
				noNewApproval(t, f)
			})
		})
	}
}

// Many same-key requests at once on two runners sharing PostgreSQL, after
// the approval: one execution, and no answer asks for a new approval.
func TestApprovalRaceAcrossInstances(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	stores := newPGStores(t, clock, 2)
	var runs atomic.Int64
	fixtures := []*fixture{
		newFixtureOn(t, clock, stores[0], []idem.Operation{refundOp(&runs), showOp()}),
		newFixtureOn(t, clock, stores[1], []idem.Operation{refundOp(&runs), showOp()}),
	}
	approve(t, fixtures[0], 9000, "k-storm")
	var wg sync.WaitGroup
	resps := make([]idem.Result, 64)
	for i := range resps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i] = fixtures[i%2].do(context.Background(), refundCall(9000, "k-storm"))
		}()
	}
	wg.Wait()
	for i, r := range resps {
		if r.Status != 200 && (r.Problem == nil || r.Problem.Code != idem.CodeIdempotencyKeyInFlight) {
			t.Fatalf("request %d answered %d %s", i, r.Status, r.Body())
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("%d executions for one key", runs.Load())
	}
	noNewApproval(t, fixtures[1])
}

// hold lets a test keep the refund handler running.
type hold struct {
	started chan struct{}
	release chan struct{}
}

func raceFixture(t *testing.T, open func(*testing.T, *fakeclock.Clock) idem.Store) (*fixture, *raceStore, *atomic.Int64, *hold) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := &raceStore{Store: open(t, clock)}
	runs := &atomic.Int64{}
	h := &hold{started: make(chan struct{}, 1), release: make(chan struct{})}
	m := refundMeta()
	m.Timeout = time.Minute
	op := idem.Define(m, func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
		runs.Add(1)
		if in.Amount == 7000 {
			h.started <- struct{}{}
			<-h.release
		}
		return refundOut{Refunded: in.Amount, Key: call.IdempotencyKey}, nil
	}).WithPolicies(overLimit)
	return newFixtureOn(t, clock, s, []idem.Operation{op, showOp()}), s, runs, h
}

// approve asks for the approval of a refund and has the approver approve it.
func approve(t *testing.T, f *fixture, amount int, key string) {
	t.Helper()
	d := expect(t, f.do(t.Context(), refundCall(amount, key)), 403, idem.CodeApprovalRequired)
	if _, err := f.runner.DecideApproval(t.Context(), approver, d.Details["approvalId"].(string), true, ""); err != nil {
		t.Fatal(err)
	}
}

// noNewApproval fails if any approval is pending: the one approval of the
// test was approved and consumed.
func noNewApproval(t *testing.T, f *fixture) {
	t.Helper()
	pending, err := f.runner.ListApprovals(t.Context(), approver, idem.ApprovalPending)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 0 {
		t.Fatalf("%d new pending approvals, e.g. %+v", len(pending), pending[0])
	}
	all, _ := f.runner.ListApprovals(t.Context(), approver, "")
	if len(all) != 1 || all[0].Status != idem.ApprovalConsumed {
		t.Fatalf("approvals = %+v, want the one consumed", all)
	}
}

func ptr(f func()) *func() { return &f }
