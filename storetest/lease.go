package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

func init() {
	register("LeaseLeftByStoreClock", testLeaseLeft)
	register("PassedLeaseIsDurableBeforeItIsAnswered", testPassedLeaseDurable)
	register("FenceCheck", testFenceCheck)
	register("InFlightWithinLeaseIsNeverForgotten", testInFlightNeverForgotten)
}

func fenceOf(a idem.Attempt) idem.Fence {
	return idem.Fence{Scope: a.Scope, Key: a.Key, FencingToken: a.FencingToken}
}

// LeaseLeft counts down by the store's clock while the record is in
// flight under the token, and is ErrFenced for another token, a final
// record, or one made indeterminate.
func testLeaseLeft(t *testing.T, e *env) {
	s := e.s(t)
	res := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	f := fenceOf(res.Attempt)
	if left, err := s.LeaseLeft(ctx(t), f); err != nil || left != lease {
		t.Fatalf("LeaseLeft at once = %s, %v; want %s", left, err, lease)
	}
	e.clock.Advance(10 * time.Second)
	if left, err := s.LeaseLeft(ctx(t), f); err != nil || left != lease-10*time.Second {
		t.Fatalf("LeaseLeft after 10 s = %s, %v; want %s", left, err, lease-10*time.Second)
	}
	e.clock.Advance(lease)
	if left, err := s.LeaseLeft(ctx(t), f); err != nil || left != 0 {
		t.Fatalf("LeaseLeft past the lease = %s, %v; want 0", left, err)
	}
	for name, other := range map[string]idem.Fence{
		"another token":     {Scope: f.Scope, Key: f.Key, FencingToken: f.FencingToken + 1},
		"another principal": {Scope: scopeB, Key: f.Key, FencingToken: f.FencingToken},
		"another key":       {Scope: f.Scope, Key: "key-2", FencingToken: f.FencingToken},
	} {
		if _, err := s.LeaseLeft(ctx(t), other); !errors.Is(err, idem.ErrFenced) {
			t.Errorf("LeaseLeft with %s: err = %v, want ErrFenced", name, err)
		}
	}

	done := mustReserve(t, s, reserveParams(scopeA, "key-done", fpOne))
	if _, err := s.Complete(ctx(t), completeParams(done.Attempt, 200, `{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LeaseLeft(ctx(t), fenceOf(done.Attempt)); !errors.Is(err, idem.ErrFenced) {
		t.Errorf("LeaseLeft of a completed record: err = %v, want ErrFenced", err)
	}
}

// A record found in flight past its lease is made indeterminate durably
// before it is answered, by GetAttempt and by the existing record Reserve
// returns: its fence no longer holds (LeaseLeft, and the fence checks of
// effects, see FenceCheck), and the sweeper finds nothing left to mark.
// A record nobody read is marked by the sweeper.
func testPassedLeaseDurable(t *testing.T, e *env) {
	s := e.s(t)
	read := mustReserve(t, s, reserveParams(scopeA, "key-read", fpOne)).Attempt
	reserved := mustReserve(t, s, reserveParams(scopeA, "key-reserved", fpOne)).Attempt
	unread := mustReserve(t, s, reserveParams(scopeA, "key-unread", fpOne)).Attempt
	e.clock.Advance(lease)

	if got := mustGet(t, s, scopeA, "key-read"); got.State != idem.AttemptIndeterminate || got.Status != 0 || got.FencingToken != read.FencingToken {
		t.Fatalf("GetAttempt past the lease = %+v, want indeterminate", got)
	}
	res, err := s.Reserve(ctx(t), reserveParams(scopeA, "key-reserved", fpOne))
	if err != nil || res.Reserved || res.Attempt.State != idem.AttemptIndeterminate || res.Attempt.FencingToken != reserved.FencingToken {
		t.Fatalf("Reserve past the lease = %+v, %v; want the record, indeterminate", res, err)
	}
	// A second store instance, with a clock that lags behind the lease,
	// still reads what the first wrote down: indeterminate.
	lagging := e.Open(t, fakeclock.New(e.clock.Now().Add(-time.Minute)))
	for _, a := range []idem.Attempt{read, reserved} {
		if _, err := s.LeaseLeft(ctx(t), fenceOf(a)); !errors.Is(err, idem.ErrFenced) {
			t.Errorf("%s: LeaseLeft after it was answered indeterminate: err = %v, want ErrFenced", a.Key, err)
		}
		if got := mustGet(t, lagging, scopeA, a.Key); got.State != idem.AttemptIndeterminate {
			t.Errorf("%s through an instance whose clock lags: %s, want indeterminate (written down)", a.Key, got.State)
		}
	}
	if left, err := s.LeaseLeft(ctx(t), fenceOf(unread)); err != nil || left != 0 {
		t.Errorf("unread record: LeaseLeft = %s, %v; want 0 (passed, not yet written down)", left, err)
	}
	sw, err := s.Sweep(ctx(t), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sw.LeasesExpired != 1 {
		t.Errorf("Sweep marked %d leases, want 1 (only the unread record)", sw.LeasesExpired)
	}
	if _, err := s.LeaseLeft(ctx(t), fenceOf(unread)); !errors.Is(err, idem.ErrFenced) {
		t.Errorf("unread record after Sweep: err = %v, want ErrFenced", err)
	}
}

// The fence check of an effect passes only while the record is in flight
// under its token with more than the margin of its lease left, judged by
// the database's clock (so this case's store clock follows the real one),
// and for unkeyed calls.
func testFenceCheck(t *testing.T, e *env) {
	clock := fakeclock.New(time.Now())
	s := e.Open(t, clock)
	a := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne)).Attempt
	f := fenceOf(a)
	for _, margin := range []time.Duration{0, time.Second} {
		if err := e.CheckFence(t, f, margin); err != nil {
			t.Fatalf("fence check of a fresh reservation (margin %s): %v", margin, err)
		}
	}
	if err := e.CheckFence(t, idem.Fence{Scope: scopeA, Key: "never-reserved"}, 0); err != nil {
		t.Errorf("fence check of an unkeyed call (token 0): %v", err)
	}
	fenced := func(what string, f idem.Fence, margin time.Duration) {
		t.Helper()
		err := e.CheckFence(t, f, margin)
		if !errors.Is(err, idem.ErrFenced) || idem.ErrorCode(err) != idem.CodeTimeout || !strings.Contains(err.Error(), "lease") {
			t.Errorf("fence check of %s: err = %v, want a TIMEOUT that wraps ErrFenced and says the lease was lost", what, err)
		}
	}
	fenced("a margin longer than the lease left", f, lease+time.Minute)
	fenced("another token", idem.Fence{Scope: f.Scope, Key: f.Key, FencingToken: f.FencingToken + 1}, 0)
	fenced("another principal's record", idem.Fence{Scope: scopeB, Key: f.Key, FencingToken: f.FencingToken}, 0)

	if _, err := s.Complete(ctx(t), completeParams(a, 200, `{}`)); err != nil {
		t.Fatal(err)
	}
	fenced("a completed record", f, 0)

	// Marked indeterminate by a reader whose store clock says the lease
	// passed: fenced, though the database's clock is still inside it.
	b := mustReserve(t, s, reserveParams(scopeA, "key-2", fpOne)).Attempt
	clock.Advance(lease)
	if got := mustGet(t, s, scopeA, "key-2"); got.State != idem.AttemptIndeterminate {
		t.Fatalf("record past its lease by the store clock = %s", got.State)
	}
	fenced("a record read as indeterminate", fenceOf(b), 0)

	// Reserved by an instance whose lease has passed by the database's
	// clock, and read by nobody: fenced all the same.
	past := e.Open(t, fakeclock.New(time.Now().Add(-lease-time.Second)))
	c := mustReserve(t, past, reserveParams(scopeA, "key-3", fpOne)).Attempt
	fenced("a record past its lease by the database's clock", fenceOf(c), 0)
}

// A record in flight within its lease is never forgotten, whatever its
// retention: not by GetAttempt, not by Reserve (which would start a second
// execution of the key), not by Sweep. Once its lease has passed too, it is.
func testInFlightNeverForgotten(t *testing.T, e *env) {
	s := e.s(t)
	p := reserveParams(scopeA, "key-1", fpOne)
	p.Retention = 10 * time.Second // shorter than the lease
	first := mustReserve(t, s, p).Attempt
	e.clock.Advance(20 * time.Second) // past its retention, within its lease

	if got := mustGet(t, s, scopeA, "key-1"); got.State != idem.AttemptInFlight || got.FencingToken != first.FencingToken {
		t.Fatalf("GetAttempt past retention, within the lease = %+v, want the record in flight", got)
	}
	res, err := s.Reserve(ctx(t), reserveParams(scopeA, "key-1", fpOne))
	if err != nil || res.Reserved || res.Attempt.FencingToken != first.FencingToken || res.Attempt.State != idem.AttemptInFlight {
		t.Fatalf("Reserve past retention, within the lease = %+v, %v; want the record in flight, not a new execution", res, err)
	}
	sw, err := s.Sweep(ctx(t), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sw.Forgotten != 0 {
		t.Errorf("Sweep forgot %d records, want 0", sw.Forgotten)
	}
	if left, err := s.LeaseLeft(ctx(t), fenceOf(first)); err != nil || left != lease-20*time.Second {
		t.Fatalf("after Sweep: LeaseLeft = %s, %v; want the record still held", left, err)
	}
	if _, err := s.Complete(ctx(t), completeParams(first, 200, `{}`)); err != nil {
		t.Fatalf("Complete within the lease, past retention: %v", err)
	}

	// Past both: forgotten, and the key may start again.
	q := reserveParams(scopeA, "key-2", fpOne)
	q.Retention = 10 * time.Second
	mustReserve(t, s, q)
	e.clock.Advance(lease)
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-2"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("GetAttempt past retention and lease: err = %v, want NOT_FOUND", err)
	}
	mustReserve(t, s, reserveParams(scopeA, "key-2", fpOne))
}
