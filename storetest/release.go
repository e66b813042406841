package storetest

import (
	"errors"
	"net/http"
	"testing"

	"github.com/idem-run/idem"
)

func init() {
	register("ReleaseFreesTheKey", testReleaseFreesTheKey)
	register("ReleaseIsFenced", testReleaseIsFenced)
	register("FreedKeyKeepsItsApproval", testFreedKeyKeepsItsApproval)
}

// releaseFinish is the end of an execution that never dispatched.
var releaseFinish = idem.FinishParams{Outcome: idem.OutcomeFailed, Code: idem.CodeUpstreamUnavailable, Attempts: 1,
	Events: []idem.AuditEvent{{Type: idem.EventFailed, Code: idem.CodeUpstreamUnavailable, Attempts: 1}}}

func testReleaseFreesTheKey(t *testing.T, e *env) {
	s := e.s(t)
	p := reserveParams(scopeA, "key-rel", fpOne)
	a := mustReserve(t, s, p).Attempt
	if err := s.Release(ctx(t), idem.ReleaseParams{Fence: idem.Fence{Scope: scopeA, Key: "key-rel", FencingToken: a.FencingToken}, Finish: releaseFinish}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-rel"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("GetAttempt after Release: %v, want NOT_FOUND", err)
	}
	x, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: scopeA.Org, ID: p.ExecutionID})
	if err != nil || x.Outcome != idem.OutcomeFailed || x.Code == nil || *x.Code != idem.CodeUpstreamUnavailable {
		t.Fatalf("the released execution = %+v, %v", x, err)
	}
	if last := x.Events[len(x.Events)-1]; last.Type != idem.EventFailed {
		t.Fatalf("the released execution's last event = %+v", last)
	}
	// The key is free: the same request reserves anew, with a new fence.
	again := reserveParams(scopeA, "key-rel", fpOne)
	b := mustReserve(t, s, again).Attempt
	if b.FencingToken == a.FencingToken || b.ExecutionID != again.ExecutionID {
		t.Fatalf("the key after Release reserved %+v (first fence %d)", b, a.FencingToken)
	}
}

func testReleaseIsFenced(t *testing.T, e *env) {
	s := e.s(t)
	a := mustReserve(t, s, reserveParams(scopeA, "key-relf", fpOne)).Attempt
	fence := idem.Fence{Scope: scopeA, Key: "key-relf", FencingToken: a.FencingToken}
	for name, f := range map[string]idem.Fence{
		"another token": {Scope: scopeA, Key: "key-relf", FencingToken: a.FencingToken + 1},
		"another scope": {Scope: scopeB, Key: "key-relf", FencingToken: a.FencingToken},
	} {
		if err := s.Release(ctx(t), idem.ReleaseParams{Fence: f, Finish: releaseFinish}); !errors.Is(err, idem.ErrFenced) {
			t.Fatalf("Release under %s: %v, want ErrFenced", name, err)
		}
	}
	e.clock.Advance(lease)
	if err := s.Release(ctx(t), idem.ReleaseParams{Fence: fence, Finish: releaseFinish}); !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("Release past the lease: %v, want ErrFenced", err)
	}
	if got := mustGet(t, s, scopeA, "key-relf"); got.State != idem.AttemptIndeterminate {
		t.Fatalf("the record after refused releases = %+v, want it kept, indeterminate by lease", got)
	}
	// A completed record is never released.
	c := mustReserve(t, s, reserveParams(scopeA, "key-relc", fpOne)).Attempt
	if _, err := s.Complete(ctx(t), completeParams(c, http.StatusCreated, `{"data":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx(t), idem.ReleaseParams{Fence: idem.Fence{Scope: scopeA, Key: "key-relc", FencingToken: c.FencingToken}, Finish: releaseFinish}); !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("Release of a completed record: %v, want ErrFenced", err)
	}
	if got := mustGet(t, s, scopeA, "key-relc"); got.State != idem.AttemptCompleted {
		t.Fatalf("the completed record after Release = %+v", got)
	}
}

// An execution that never ran (NotDispatched) gives back the approval it
// consumed, in the transaction that frees its key (keyed: Release) or
// finishes it (unkeyed: FinishExecution): the same intent then consumes it
// again (SPEC §8, issue 33 item 6). A ReturnApproval naming an approval
// another execution consumed changes nothing.
func testFreedKeyKeepsItsApproval(t *testing.T, e *env) {
	s := e.s(t)
	mustBeApproved := func(what string, a idem.Approval) {
		t.Helper()
		got, err := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: a.ID})
		if err != nil || got.Status != idem.ApprovalApproved || got.ConsumedAt != nil || got.ExecutionID != nil {
			t.Fatalf("the approval after %s = %+v, %v; want it approved and unconsumed again", what, got, err)
		}
	}
	// Keyed.
	a := approvedApproval(t, e, "agent-1", fpOne)
	p := reserveParams(scopeA, "key-apr", fpOne)
	p.ApprovalID = a.ID
	r := mustReserve(t, s, p).Attempt
	fin := releaseFinish
	fin.ReturnApproval = a.ID
	if err := s.Release(ctx(t), idem.ReleaseParams{Fence: idem.Fence{Scope: scopeA, Key: "key-apr", FencingToken: r.FencingToken}, Finish: fin}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	mustBeApproved("Release", a)
	again := reserveParams(scopeA, "key-apr", fpOne)
	again.ApprovalID = a.ID
	if res, err := s.Reserve(ctx(t), again); err != nil || !res.Reserved {
		t.Fatalf("the same call after Release: %+v, %v; want it reserved, consuming the approval again", res, err)
	}
	if got, _ := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: a.ID}); got.Status != idem.ApprovalConsumed || got.ExecutionID == nil || *got.ExecutionID != again.ExecutionID {
		t.Fatalf("the approval after the second reservation = %+v", got)
	}
	// A fenced Release gives nothing back.
	if err := s.Release(ctx(t), idem.ReleaseParams{Fence: idem.Fence{Scope: scopeA, Key: "key-apr", FencingToken: r.FencingToken}, Finish: fin}); !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("Release under the old fence: %v, want ErrFenced", err)
	}
	if got, _ := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: a.ID}); got.Status != idem.ApprovalConsumed {
		t.Fatalf("a fenced Release gave the approval back: %+v", got)
	}
	// Unkeyed.
	b := approvedApproval(t, e, "agent-1", fpTwo)
	start := idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.refund", Fingerprint: fpTwo, ApprovalID: b.ID}
	if _, err := s.StartExecution(ctx(t), start); err != nil {
		t.Fatal(err)
	}
	// Finishing another execution with b's id gives nothing back.
	other := idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.refund", Fingerprint: fpTwo}
	if _, err := s.StartExecution(ctx(t), other); err != nil {
		t.Fatal(err)
	}
	wrong := releaseFinish
	wrong.Org, wrong.ExecutionID, wrong.ReturnApproval = "acme", other.ExecutionID, b.ID
	if err := s.FinishExecution(ctx(t), wrong); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: b.ID}); got.Status != idem.ApprovalConsumed {
		t.Fatalf("finishing another execution gave the approval back: %+v", got)
	}
	unkeyed := releaseFinish
	unkeyed.Org, unkeyed.ExecutionID, unkeyed.ReturnApproval = "acme", start.ExecutionID, b.ID
	if err := s.FinishExecution(ctx(t), unkeyed); err != nil {
		t.Fatalf("FinishExecution: %v", err)
	}
	mustBeApproved("FinishExecution", b)
	start.ExecutionID = newID("exe_")
	if _, err := s.StartExecution(ctx(t), start); err != nil {
		t.Fatalf("the same unkeyed call after its approval came back: %v", err)
	}
}
