package storetest

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

func init() {
	register("AuditRetention", testAuditRetention)
}

// auditWindow is the audit retention the cases sweep with.
const auditWindow = 7 * 24 * time.Hour

// auditLag is how far past the window a store may keep an execution
// (SweepParams.AuditRetention allows a store to remove it in a later
// round).
const auditLag = 24 * time.Hour

// sweepAudit sweeps with the audit window until a round leaves nothing.
func sweepAudit(t *testing.T, s idem.Store, window time.Duration) {
	t.Helper()
	for round := 0; ; round++ {
		r, err := s.Sweep(ctx(t), idem.SweepParams{AuditRetention: window})
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if r.Done(500) {
			return
		}
		if round == 100 {
			t.Fatalf("Sweep still not done after %d rounds: %+v", round, r)
		}
	}
}

// Executions (keyed and unkeyed, finished or left running by a process
// that died) leave with all their events once they started more than the
// audit retention ago; one within the window stays whole, and one that
// names a removed execution as its reinvocationOf still reads as stored.
// A zero retention keeps everything.
func testAuditRetention(t *testing.T, e *env) {
	s := e.s(t)
	sweepAudit(t, s, auditWindow)

	// At the start: a keyed execution completed, with an event appended
	// later (a replay), and an unkeyed one whose process died.
	keyed := mustReserve(t, s, reserveParams(scopeA, "key-old", fpOne))
	e.clock.Advance(time.Second)
	if _, err := s.Complete(ctx(t), completeParams(keyed.Attempt, 200, `{}`)); err != nil {
		t.Fatal(err)
	}
	orphan, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeB, Operation: "order.show", Fingerprint: fpTwo})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(12 * time.Hour)
	if err := s.AppendEvents(ctx(t), idem.AppendEventsParams{Org: scopeA.Org, Events: []idem.AuditEvent{{ExecutionID: keyed.Execution.ID, Type: idem.EventReplayed}}}); err != nil {
		t.Fatal(err)
	}
	// A day and a half in: a re-invocation of the keyed one, with more
	// events than one statement per event appends.
	e.clock.Advance(24 * time.Hour)
	again, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.refund", Fingerprint: fpOne})
	if err != nil {
		t.Fatal(err)
	}
	if again.ReinvocationOf == nil || *again.ReinvocationOf != keyed.Execution.ID {
		t.Fatalf("re-invocation's reinvocationOf = %v, want %s", again.ReinvocationOf, keyed.Execution.ID)
	}
	var finals []idem.AuditEvent
	for i := range 6 {
		finals = append(finals, idem.AuditEvent{Type: idem.EventRetried, Attempt: i + 2})
	}
	finals = append(finals, idem.AuditEvent{Type: idem.EventSucceeded, Attempts: 7})
	if err := s.FinishExecution(ctx(t), idem.FinishParams{Org: scopeA.Org, ExecutionID: again.ID, Outcome: idem.OutcomeSucceeded,
		Attempts: 7, Events: finals}); err != nil {
		t.Fatal(err)
	}
	againBefore, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: again.ID})
	if err != nil {
		t.Fatal(err)
	}

	gone := func(what, id string) {
		t.Helper()
		if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: id}); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("%s past the audit retention: err = %v, want NOT_FOUND", what, err)
		}
	}
	kept := func(what string, want idem.Execution) {
		t.Helper()
		got, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: want.Org, ID: want.ID})
		if err != nil {
			t.Fatalf("%s within the audit retention: %v", what, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s within the audit retention = %+v, want %+v", what, got, want)
		}
	}
	listed := func(want ...string) {
		t.Helper()
		list, err := s.ListExecutions(ctx(t), idem.ListExecutionsParams{Org: scopeA.Org})
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, x := range list {
			got = append(got, x.ID)
		}
		if want == nil {
			want = []string{}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ListExecutions = %v, want %v", got, want)
		}
	}

	// The re-invocation started 1 µs short of the window ago, the first
	// two more than the window and a day ago.
	e.clock.Advance(again.StartedAt.Add(auditWindow - time.Microsecond).Sub(e.clock.Now()))
	sweepAudit(t, s, 0) // a zero retention keeps everything
	if x, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: keyed.Execution.ID}); err != nil || len(x.Events) != 3 {
		t.Fatalf("keyed execution with no audit retention = %+v, %v; want it with its 3 events", x, err)
	}
	if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeB.Org, ID: orphan.ID}); err != nil {
		t.Fatalf("running execution with no audit retention: %v", err)
	}

	sweepAudit(t, s, auditWindow)
	gone("the keyed execution", keyed.Execution.ID)
	gone("the running execution", orphan.ID)
	kept("the re-invocation", againBefore) // reinvocationOf as stored
	listed(again.ID)
	if err := s.AppendEvents(ctx(t), idem.AppendEventsParams{Org: scopeA.Org, Events: []idem.AuditEvent{{ExecutionID: keyed.Execution.ID, Type: idem.EventReplayed}}}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("AppendEvents to a removed execution: err = %v, want NOT_FOUND", err)
	}
	err = s.FinishExecution(ctx(t), idem.FinishParams{Org: scopeB.Org, ExecutionID: orphan.ID, Outcome: idem.OutcomeFailed,
		Code: idem.CodeExecutionFailed, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventFailed}}})
	if !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("FinishExecution of a removed execution: err = %v, want NOT_FOUND", err)
	}
	third, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.refund", Fingerprint: fpOne})
	if err != nil {
		t.Fatal(err)
	}
	if third.ReinvocationOf == nil || *third.ReinvocationOf != again.ID {
		t.Fatalf("third execution's reinvocationOf = %v, want %s (the most recent one left)", third.ReinvocationOf, again.ID)
	}

	// Once all of them are past the window by more than a day, nothing is
	// left, and the intent starts afresh.
	e.clock.Advance(auditWindow + auditLag + time.Second)
	sweepAudit(t, s, auditWindow)
	gone("the re-invocation", again.ID)
	gone("the third execution", third.ID)
	listed()
	fresh, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.refund", Fingerprint: fpOne})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.ReinvocationOf != nil {
		t.Fatalf("execution after every earlier one was removed: reinvocationOf = %s, want none", *fresh.ReinvocationOf)
	}
}
