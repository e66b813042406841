package storetest

import (
	"testing"
	"time"

	"idem"
)

func init() {
	register("ExecutionsAndAuditEvents", testExecutions)
	register("ReinvocationOfMostRecent", testReinvocation)
}

func testExecutions(t *testing.T, e *env) {
	s := e.s(t)
	start := idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "business.list", Fingerprint: fpOne}
	x, err := s.StartExecution(ctx(t), start)
	if err != nil {
		t.Fatal(err)
	}
	if x.ID != start.ExecutionID || x.Outcome != idem.OutcomeRunning || x.Attempts != 1 || x.Principal != "agent-1" ||
		x.Operation != "business.list" || !x.StartedAt.Equal(e.clock.Now()) || x.ReinvocationOf != nil {
		t.Fatalf("started execution = %+v", x)
	}
	e.clock.Advance(time.Second)
	if err := s.AppendEvents(ctx(t), "acme", idem.AuditEvent{ExecutionID: x.ID, Type: idem.EventRetried, At: e.clock.Now(), Attempt: 2, PreviousErrorCode: idem.CodeTimeout}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	err = s.FinishExecution(ctx(t), idem.FinishParams{
		Org: "acme", ExecutionID: x.ID, Outcome: idem.OutcomeFailed, Code: idem.CodeTimeout, Attempts: 2,
		Events: []idem.AuditEvent{{ExecutionID: x.ID, Type: idem.EventFailed, At: e.clock.Now(), Code: idem.CodeTimeout, Attempts: 2, DurationMs: 2000, Data: map[string]string{"status": "504"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetExecution(ctx(t), "acme", x.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != idem.OutcomeFailed || got.Code == nil || *got.Code != idem.CodeTimeout || got.Attempts != 2 ||
		got.FinishedAt == nil || !got.FinishedAt.Equal(e.clock.Now()) {
		t.Fatalf("finished execution = %+v", got)
	}
	if len(got.Events) != 3 {
		t.Fatalf("events = %+v, want 3", got.Events)
	}
	started, retried, failed := got.Events[0], got.Events[1], got.Events[2]
	if started.Type != idem.EventStarted || started.Attempt != 1 || !started.At.Equal(x.StartedAt) {
		t.Errorf("started event = %+v", started)
	}
	if retried.Type != idem.EventRetried || retried.Attempt != 2 || retried.PreviousErrorCode != idem.CodeTimeout {
		t.Errorf("retried event = %+v", retried)
	}
	if failed.Type != idem.EventFailed || failed.Code != idem.CodeTimeout || failed.Attempts != 2 || failed.DurationMs != 2000 || failed.Data["status"] != "504" {
		t.Errorf("failed event = %+v", failed)
	}
	if _, err := s.GetExecution(ctx(t), "globex", x.ID); idem.ErrorCode(err) != idem.CodeNotFound {
		t.Errorf("another org read the execution: err = %v", err)
	}
}

func testReinvocation(t *testing.T, e *env) {
	s := e.s(t)
	start := func(scope idem.Scope, op, fp string) idem.Execution {
		t.Helper()
		e.clock.Advance(time.Second)
		x, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scope, Operation: op, Fingerprint: fp})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	first := start(scopeA, "order.refund", fpOne)
	start(scopeB, "order.refund", fpOne) // another principal
	start(scopeA, "order.show", fpOne)   // another operation
	start(scopeA, "order.refund", fpTwo) // another intent
	start(scopeC, "order.refund", fpOne) // another org
	second := start(scopeA, "order.refund", fpOne)
	if second.ReinvocationOf == nil || *second.ReinvocationOf != first.ID {
		t.Fatalf("second execution reinvocationOf = %v, want %s", second.ReinvocationOf, first.ID)
	}
	// A keyed reservation is an execution too.
	res := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	if res.Execution.ReinvocationOf == nil || *res.Execution.ReinvocationOf != second.ID {
		t.Fatalf("keyed execution reinvocationOf = %v, want the most recent %s", res.Execution.ReinvocationOf, second.ID)
	}
	got, err := s.GetExecution(ctx(t), "acme", second.ID)
	if err != nil || got.ReinvocationOf == nil || *got.ReinvocationOf != first.ID {
		t.Fatalf("GetExecution reinvocationOf = %+v, %v", got, err)
	}
}
