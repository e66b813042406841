package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

func init() {
	register("ConcurrentReserveOneWinner", testConcurrentReserve)
	register("ApprovalConsumedOnceUnderConcurrency", testApprovalConsumedOnce)
	register("ConcurrentSweepers", testConcurrentSweepers)
	register("ConcurrentReserveOfForgottenKeyOneWinner", testConcurrentReserveForgotten)
}

const racers = 64

// instances opens two store instances on the harness's database (separate
// connection pools), so that races cross instances as they do between
// servers.
func instances(t *testing.T, e *env) []idem.Store {
	return []idem.Store{e.s(t), e.Open(t, e.clock)}
}

func testConcurrentReserve(t *testing.T, e *env) {
	stores := instances(t, e)
	results := make([]idem.ReserveResult, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = stores[i%len(stores)].Reserve(ctx(t), reserveParams(scopeA, "contended", fpOne))
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	var winner idem.Attempt
	for i, err := range errs {
		if err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
		if results[i].Reserved {
			winners++
			winner = results[i].Attempt
		}
	}
	if winners != 1 {
		t.Fatalf("%d racers reserved the key, want exactly 1", winners)
	}
	for i, r := range results {
		if r.Reserved {
			continue
		}
		if r.Attempt.State != idem.AttemptInFlight || r.Attempt.FencingToken != winner.FencingToken || r.Attempt.ExecutionID != winner.ExecutionID {
			t.Fatalf("racer %d saw %+v, want the winner's in-flight record", i, r.Attempt)
		}
	}
}

// A record past retention gives way to exactly one new attempt, however
// many instances race for its key, and the old record is gone.
func testConcurrentReserveForgotten(t *testing.T, e *env) {
	stores := instances(t, e)
	old := mustReserve(t, stores[0], reserveParams(scopeA, "contended", fpOne))
	if _, err := stores[0].Complete(ctx(t), completeParams(old.Attempt, 200, `{"old":true}`)); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(keepFor + time.Hour)
	results := make([]idem.ReserveResult, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			results[i], errs[i] = stores[i%len(stores)].Reserve(ctx(t), reserveParams(scopeA, "contended", fpTwo))
		})
	}
	close(start)
	wg.Wait()
	var winners []idem.Attempt
	for i, err := range errs {
		if err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
		if results[i].Reserved {
			winners = append(winners, results[i].Attempt)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d racers reserved the forgotten key, want exactly 1", len(winners))
	}
	for i, r := range results {
		if r.Attempt.FencingToken != winners[0].FencingToken || r.Attempt.State != idem.AttemptInFlight {
			t.Fatalf("racer %d saw %+v, want the winner's new record", i, r.Attempt)
		}
	}
	got := mustGet(t, stores[1], scopeA, "contended")
	if got.FencingToken != winners[0].FencingToken || got.Fingerprint != fpTwo || got.Body != nil {
		t.Fatalf("record after the race = %+v, want the winner's", got)
	}
	// The old record is gone, not merely hidden: a sweep finds nothing
	// of it to forget.
	sw, err := stores[0].Sweep(ctx(t), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sw.Forgotten != 0 {
		t.Fatalf("Sweep forgot %d records after the key was reserved anew, want 0", sw.Forgotten)
	}
	if got := mustGet(t, stores[0], scopeA, "contended"); got.FencingToken != winners[0].FencingToken {
		t.Fatalf("record after Sweep = %+v", got)
	}
}

func testApprovalConsumedOnce(t *testing.T, e *env) {
	stores := instances(t, e)
	approval := approvedApproval(t, e, "agent-1", fpOne)
	type outcome struct {
		res idem.ReserveResult
		err error
	}
	run := func(sameKey bool) []outcome {
		out := make([]outcome, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := newID("k-")
				if sameKey {
					key = "one-key"
				}
				p := reserveParams(scopeA, key, fpOne)
				p.Operation = approval.Operation
				p.ApprovalID = approval.ID
				<-start
				r, err := stores[i%len(stores)].Reserve(ctx(t), p)
				out[i] = outcome{r, err}
			}()
		}
		close(start)
		wg.Wait()
		return out
	}

	// Different keys: one reservation consumes the approval, every other
	// one fails and stores nothing.
	consumed := 0
	for i, o := range run(false) {
		switch {
		case o.err == nil && o.res.Reserved:
			consumed++
		case errors.Is(o.err, idem.ErrApprovalNotConsumable):
		default:
			t.Fatalf("racer %d: %+v, %v; want a reservation or ErrApprovalNotConsumable", i, o.res, o.err)
		}
	}
	if consumed != 1 {
		t.Fatalf("approval consumed by %d reservations, want exactly 1", consumed)
	}
	got, err := e.s(t).GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: approval.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != idem.ApprovalConsumed || got.ConsumedAt == nil || got.ExecutionID == nil {
		t.Fatalf("approval after the race = %+v", got)
	}

	// One key: one reservation wins (with a second approval); the others
	// find its record.
	approval = approvedApproval(t, e, "agent-1", fpOne)
	reserved := 0
	for i, o := range run(true) {
		if o.err != nil {
			t.Fatalf("racer %d: %v", i, o.err)
		}
		if o.res.Reserved {
			reserved++
		}
	}
	if reserved != 1 {
		t.Fatalf("%d reservations of one key, want 1", reserved)
	}
	if got, _ := e.s(t).GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: approval.ID}); got.Status != idem.ApprovalConsumed {
		t.Fatalf("second approval = %s, want consumed", got.Status)
	}
}

func testConcurrentSweepers(t *testing.T, e *env) {
	stores := instances(t, e)
	const records = 300
	for i := range records {
		res := mustReserve(t, stores[0], reserveParams(scopeA, newID("old-"), fpOne))
		if i%2 == 0 {
			if _, err := stores[0].Complete(ctx(t), completeParams(res.Attempt, 200, `{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.clock.Advance(keepFor)
	live := mustReserve(t, stores[0], reserveParams(scopeA, "live", fpOne))

	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for _, s := range stores {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, err := s.Sweep(ctx(t), idem.SweepParams{BatchSize: 25})
					if err != nil {
						t.Errorf("Sweep: %v", err)
						return
					}
					mu.Lock()
					total += r.Forgotten
					mu.Unlock()
					if r.Done(25) {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if total != records {
		t.Fatalf("sweepers forgot %d records in all, want %d (each exactly once)", total, records)
	}
	if got := mustGet(t, stores[1], scopeA, "live"); got.FencingToken != live.Attempt.FencingToken {
		t.Fatalf("sweepers touched a live record: %+v", got)
	}
}
