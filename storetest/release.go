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
