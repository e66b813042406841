package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

func init() {
	register("ExecutionsAndAuditEvents", testExecutions)
	register("ReinvocationOfMostRecent", testReinvocation)
	register("ListExecutionsNewestFirstFiltered", testListExecutions)
	register("FinishAppendsEventsInOrderOrNotAtAll", testFinishEvents)
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
	if err := s.AppendEvents(ctx(t), idem.AppendEventsParams{Org: "acme", Events: []idem.AuditEvent{{ExecutionID: x.ID, Type: idem.EventRetried, At: e.clock.Now(), Attempt: 2, PreviousErrorCode: idem.CodeTimeout}}}); err != nil {
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
	got, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: x.ID})
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
	if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "globex", ID: x.ID}); idem.ErrorCode(err) != idem.CodeNotFound {
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
	got, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: second.ID})
	if err != nil || got.ReinvocationOf == nil || *got.ReinvocationOf != first.ID {
		t.Fatalf("GetExecution reinvocationOf = %+v, %v", got, err)
	}
}

func testListExecutions(t *testing.T, e *env) {
	s := e.s(t)
	start := func(scope idem.Scope, op string, outcome idem.Outcome) idem.Execution {
		t.Helper()
		e.clock.Advance(time.Millisecond)
		x, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scope, Operation: op, Fingerprint: fpOne})
		if err != nil {
			t.Fatal(err)
		}
		if outcome != idem.OutcomeRunning {
			code := idem.Code("")
			if outcome == idem.OutcomeFailed {
				code = idem.CodeExecutionFailed
			}
			if err := s.FinishExecution(ctx(t), idem.FinishParams{Org: scope.Org, ExecutionID: x.ID, Outcome: outcome, Code: code, Attempts: 1,
				Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		return x
	}
	a1 := start(scopeA, "order.refund", idem.OutcomeSucceeded)
	b1 := start(scopeB, "order.refund", idem.OutcomeFailed)
	a2 := start(scopeA, "order.show", idem.OutcomeRunning)
	start(scopeC, "order.refund", idem.OutcomeSucceeded) // another org
	a3 := start(scopeA, "order.refund", idem.OutcomeFailed)

	ids := func(p idem.ListExecutionsParams) []string {
		t.Helper()
		list, err := s.ListExecutions(ctx(t), p)
		if err != nil {
			t.Fatalf("ListExecutions(%+v): %v", p, err)
		}
		out := []string{}
		for _, x := range list {
			if len(x.Events) != 0 {
				t.Errorf("ListExecutions returned events for %s", x.ID)
			}
			out = append(out, x.ID)
		}
		return out
	}
	for _, c := range []struct {
		name string
		p    idem.ListExecutionsParams
		want []string
	}{
		{"org newest first", idem.ListExecutionsParams{Org: "acme"}, []string{a3.ID, a2.ID, b1.ID, a1.ID}},
		{"principal", idem.ListExecutionsParams{Org: "acme", Principal: "agent-1"}, []string{a3.ID, a2.ID, a1.ID}},
		{"operation", idem.ListExecutionsParams{Org: "acme", Operation: "order.refund"}, []string{a3.ID, b1.ID, a1.ID}},
		{"outcome", idem.ListExecutionsParams{Org: "acme", Outcome: idem.OutcomeFailed}, []string{a3.ID, b1.ID}},
		{"all filters", idem.ListExecutionsParams{Org: "acme", Principal: "agent-1", Operation: "order.refund", Outcome: idem.OutcomeSucceeded}, []string{a1.ID}},
		{"limit", idem.ListExecutionsParams{Org: "acme", Limit: 2}, []string{a3.ID, a2.ID}},
		{"unknown org", idem.ListExecutionsParams{Org: "initech"}, []string{}},
	} {
		if got := ids(c.p); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}

	list, err := s.ListExecutions(ctx(t), idem.ListExecutionsParams{Org: "acme", Principal: "agent-1", Outcome: idem.OutcomeFailed})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListExecutions = %+v, %v", list, err)
	}
	x := list[0]
	if x.Operation != "order.refund" || x.Principal != "agent-1" || x.Outcome != idem.OutcomeFailed || x.Code == nil ||
		*x.Code != idem.CodeExecutionFailed || x.FinishedAt == nil || !x.StartedAt.Equal(a3.StartedAt) ||
		x.ReinvocationOf == nil || *x.ReinvocationOf != a1.ID {
		t.Errorf("listed execution = %+v", x)
	}
}

// testFinishEvents finishes executions, keyed (Complete) and unkeyed,
// with more final events than a short list (a call retried several
// times): they land in order, those without an execution id on the
// finished one. Finishing an unknown execution fails with NOT_FOUND
// naming it; a fenced Complete appends no event.
func testFinishEvents(t *testing.T, e *env) {
	s := e.s(t)
	finalEvents := func(id string) []idem.AuditEvent {
		var events []idem.AuditEvent
		for i := range 6 {
			events = append(events, idem.AuditEvent{ExecutionID: id, Type: idem.EventRetried, Attempt: i + 2, PreviousErrorCode: idem.CodeTimeout})
		}
		events[1].ExecutionID = "" // the finished execution's
		return append(events, idem.AuditEvent{Type: idem.EventSucceeded, Attempts: 7, Data: map[string]string{"n": "last"}})
	}
	check := func(id string, want int) {
		t.Helper()
		x, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(x.Events) != want {
			t.Fatalf("execution %s has events %v, want %d", id, eventTypes(x), want)
		}
		if want == 1 {
			if x.Outcome != idem.OutcomeRunning {
				t.Fatalf("a failed finish recorded outcome %s", x.Outcome)
			}
			return
		}
		for i, ev := range x.Events[1 : want-1] {
			if ev.Type != idem.EventRetried || ev.Attempt != i+2 || ev.ExecutionID != id {
				t.Fatalf("event %d = %+v, want execution.retried attempt %d", i+1, ev, i+2)
			}
		}
		if last := x.Events[want-1]; last.Type != idem.EventSucceeded || last.Data["n"] != "last" || x.Outcome != idem.OutcomeSucceeded || x.Attempts != 7 {
			t.Fatalf("final event %+v, execution %+v", last, x)
		}
	}

	// Keyed: a fenced Complete first, then the real one.
	res := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	p := completeParams(res.Attempt, 200, `{}`)
	p.Finish.Attempts, p.Finish.Events = 7, finalEvents(res.Attempt.ExecutionID)
	stale := p
	stale.FencingToken++
	if _, err := s.Complete(ctx(t), stale); !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("fenced Complete: err = %v", err)
	}
	check(res.Attempt.ExecutionID, 1)
	if _, err := s.Complete(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	check(res.Attempt.ExecutionID, 8)

	// Unkeyed, with a short and a long list.
	for _, n := range []int{1, 7} {
		x, err := s.StartExecution(ctx(t), idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "business.list", Fingerprint: fpOne})
		if err != nil {
			t.Fatal(err)
		}
		events := finalEvents(x.ID)
		fin := idem.FinishParams{Org: scopeA.Org, ExecutionID: x.ID, Outcome: idem.OutcomeSucceeded, Attempts: 7, Events: events[len(events)-n:]}
		unknown := fin
		unknown.ExecutionID = "exe_unknown"
		if err := s.FinishExecution(ctx(t), unknown); !errors.Is(err, idem.ErrNotFound) || !strings.Contains(err.Error(), "exe_unknown") {
			t.Fatalf("finish of an unknown execution: err = %v, want NOT_FOUND naming exe_unknown", err)
		}
		check(x.ID, 1)
		if err := s.FinishExecution(ctx(t), fin); err != nil {
			t.Fatal(err)
		}
		check(x.ID, n+1)
	}
}
