package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idem-run/idem"
)

func init() {
	register("ConcurrentWritesFailAlone", testConcurrentWritesFailAlone)
	register("ManyEventsAppendInOrderOrNotAtAll", testManyEvents)
}

// testManyEvents appends many events in one call (the runner drains replay
// events in batches): they keep their order; one naming an unknown
// execution fails the call, and nothing of it is written.
func testManyEvents(t *testing.T, e *env) {
	s := e.s(t)
	x, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.refund", Fingerprint: fpOne})
	if err != nil {
		t.Fatal(err)
	}
	var events []idem.AuditEvent
	for i := range 50 {
		events = append(events, idem.AuditEvent{ExecutionID: x.ID, Type: idem.EventReplayed, At: e.clock.Now(),
			Data: map[string]string{"n": fmt.Sprint(i)}})
	}
	if err := s.AppendEvents(ctx(t), idem.AppendEventsParams{Org: scopeA.Org, Events: events}); err != nil {
		t.Fatal(err)
	}
	bad := append(append([]idem.AuditEvent(nil), events[:20]...), idem.AuditEvent{ExecutionID: "exe_missing", Type: idem.EventReplayed, At: e.clock.Now()})
	if err := s.AppendEvents(ctx(t), idem.AppendEventsParams{Org: scopeA.Org, Events: bad}); !errors.Is(err, idem.ErrNotFound) || !strings.Contains(err.Error(), "exe_missing") {
		t.Fatalf("append with an unknown execution: err = %v, want NOT_FOUND naming exe_missing", err)
	}
	got, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: x.ID})
	if err != nil {
		t.Fatal(err)
	}
	replays := got.Events[1:] // after execution.started
	if len(replays) != 50 {
		t.Fatalf("%d events after execution.started, want 50 (a failed call must write none)", len(replays))
	}
	for i, ev := range replays {
		if ev.Type != idem.EventReplayed || ev.Data["n"] != fmt.Sprint(i) {
			t.Fatalf("event %d = %+v, want execution.replayed n=%d (order kept)", i, ev, i)
		}
	}
}

// testConcurrentWritesFailAlone sends many writes at once, a third of them
// bound to fail (completions under a stale fencing token, events for an
// unknown execution), so that a store batching writes into shared
// transactions (group commit) meets failures inside its batches: each
// failure must stay its caller's, and every other write must land whole.
func testConcurrentWritesFailAlone(t *testing.T, e *env) {
	s := e.s(t)
	reserved := make([]idem.ReserveResult, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			res, err := s.Reserve(ctx(t), reserveParams(scopeA, fmt.Sprint("batch-", i), fpOne))
			if err != nil || !res.Reserved {
				t.Errorf("reserve %d: reserved=%v err=%v", i, res.Reserved, err)
			}
			reserved[i] = res
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	errs := make([]error, racers)
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			a := reserved[i].Attempt
			switch i % 3 {
			case 0: // fenced: a token that never reserved anything
				p := completeParams(a, 200, `{"stale":true}`)
				p.FencingToken = -1
				_, errs[i] = s.Complete(ctx(t), p)
			case 1:
				_, errs[i] = s.Complete(ctx(t), completeParams(a, 201, fmt.Sprintf(`{"n":%d}`, i)))
			case 2: // an event for an execution that does not exist, then a good completion
				errs[i] = s.AppendEvents(ctx(t), idem.AppendEventsParams{Org: scopeA.Org, Events: []idem.AuditEvent{{ExecutionID: "exe_missing", Type: idem.EventReplayed, At: e.clock.Now()}}})
				if _, err := s.Complete(ctx(t), completeParams(a, 201, fmt.Sprintf(`{"n":%d}`, i))); err != nil {
					t.Errorf("complete %d after a failed append: %v", i, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()

	for i := range racers {
		a := mustGet(t, s, scopeA, fmt.Sprint("batch-", i))
		switch i % 3 {
		case 0:
			if !errors.Is(errs[i], idem.ErrFenced) {
				t.Errorf("stale completion %d: err = %v, want ErrFenced", i, errs[i])
			}
			if a.State != idem.AttemptInFlight {
				t.Errorf("record %d: state %s after a fenced completion, want in_flight", i, a.State)
			}
		default:
			if i%3 == 1 && errs[i] != nil {
				t.Errorf("completion %d: %v", i, errs[i])
			}
			if i%3 == 2 && !errors.Is(errs[i], idem.ErrNotFound) {
				t.Errorf("append to an unknown execution (%d): err = %v, want NOT_FOUND", i, errs[i])
			}
			if want := fmt.Sprintf(`{"n":%d}`, i); a.State != idem.AttemptCompleted || string(a.Body) != want {
				t.Errorf("record %d: state %s body %s, want completed %s", i, a.State, a.Body, want)
			}
			x, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: a.ExecutionID})
			if err != nil || x.Outcome != idem.OutcomeSucceeded {
				t.Errorf("execution of record %d: outcome %q err %v, want succeeded", i, x.Outcome, err)
			}
		}
	}
}
