package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

func init() {
	register("RecordFinishedExecutions", testRecordExecutions)
}

// testRecordExecutions records finished executions in one call (the
// runner's fresh reads, after their answer): each reads back as started
// and finished at its own times with its events, and links to the most
// recent earlier execution of its intent, one recorded in the same call
// included. A call with an id that exists writes nothing.
func testRecordExecutions(t *testing.T, e *env) {
	s := e.s(t)
	before, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.show", Fingerprint: fpOne})
	if err != nil {
		t.Fatal(err)
	}
	t0 := e.clock.Now().Add(time.Second)
	read := func(fp string, i int) idem.FinishedExecution {
		id := newID("exe_")
		at := t0.Add(time.Duration(i) * time.Millisecond)
		return idem.FinishedExecution{
			Start:     idem.StartParams{ExecutionID: id, Scope: scopeA, Operation: "order.show", Fingerprint: fp},
			StartedAt: at,
			Finish: idem.FinishParams{Org: scopeA.Org, ExecutionID: id, Outcome: idem.OutcomeSucceeded, Attempts: 2,
				Events: []idem.AuditEvent{
					{ExecutionID: id, Type: idem.EventRetried, At: at.Add(200 * time.Microsecond), Attempt: 2, PreviousErrorCode: idem.CodeTimeout},
					{ExecutionID: id, Type: idem.EventSucceeded, At: at.Add(300 * time.Microsecond), Attempts: 2, DurationMs: 1,
						Data: map[string]string{"status": "200"}},
				}},
			FinishedAt: at.Add(300 * time.Microsecond),
		}
	}
	reads := []idem.FinishedExecution{read(fpOne, 0), read(fpTwo, 1), read(fpOne, 2)}
	if err := s.RecordExecutions(ctx(t), idem.RecordExecutionsParams{Executions: reads}); err != nil {
		t.Fatal(err)
	}
	wantPrevious := []string{before.ID, "", reads[0].Start.ExecutionID}
	for i, r := range reads {
		x, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: r.Start.ExecutionID})
		if err != nil {
			t.Fatalf("recorded execution %d: %v", i, err)
		}
		prev := ""
		if x.ReinvocationOf != nil {
			prev = *x.ReinvocationOf
		}
		got := fmt.Sprint(x.Outcome, x.Attempts, x.Principal, x.Key, prev)
		want := fmt.Sprint(idem.OutcomeSucceeded, 2, scopeA.Principal, "", wantPrevious[i])
		if got != want || !x.StartedAt.Equal(r.StartedAt) || x.FinishedAt == nil || !x.FinishedAt.Equal(r.FinishedAt) {
			t.Errorf("recorded execution %d = %+v; want %s, started %v, finished %v", i, x, want, r.StartedAt, r.FinishedAt)
		}
		if len(x.Events) != 3 || x.Events[0].Type != idem.EventStarted || !x.Events[0].At.Equal(r.StartedAt) ||
			x.Events[1].Type != idem.EventRetried || x.Events[1].PreviousErrorCode != idem.CodeTimeout ||
			x.Events[2].Type != idem.EventSucceeded || x.Events[2].Data["status"] != "200" || !x.Events[2].At.Equal(r.FinishedAt) {
			t.Errorf("recorded execution %d events = %+v; want started, retried, succeeded at their times", i, x.Events)
		}
	}
	// An id that exists: nothing of the call is written.
	again := []idem.FinishedExecution{read(fpTwo, 3), reads[1]}
	if err := s.RecordExecutions(ctx(t), idem.RecordExecutionsParams{Executions: again}); err == nil {
		t.Fatal("RecordExecutions with an id that exists: no error")
	}
	if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: again[0].Start.ExecutionID}); idem.ErrorCode(err) != idem.CodeNotFound {
		t.Fatalf("the failed call wrote its first execution: %v", err)
	}
}
