package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// A keyed approval request answers with the key's attempt record when
// there is one (issue 15, item 3): a same-key retry that raced the
// execution its approval authorized must not open a new approval.

func init() {
	register("ApprovalRequestOfAKeyWithARecord", testApprovalRequestKeyWithRecord)
	register("KeyedApprovalRequestRacingReserve", testKeyedApprovalRequestRacingReserve)
}

// keyedApprovalParams is approvalParams for agent-1's request under key.
func keyedApprovalParams(key, fingerprint string) idem.RequestApprovalParams {
	p := approvalParams("acme", "agent-1", fingerprint)
	p.Key = key
	return p
}

// wantAttemptExists fails unless err reports the record a.
func wantAttemptExists(t *testing.T, err error, a idem.Attempt) {
	t.Helper()
	var ae *idem.AttemptExistsError
	if !errors.As(err, &ae) || !errors.Is(err, idem.ErrAttemptExists) {
		t.Fatalf("RequestApproval: err = %v, want an *AttemptExistsError", err)
	}
	if ae.Attempt.Scope != a.Scope || ae.Attempt.Key != a.Key || ae.Attempt.Fingerprint != a.Fingerprint ||
		ae.Attempt.ExecutionID != a.ExecutionID || ae.Attempt.State != a.State {
		t.Fatalf("reported record %+v, want %+v", ae.Attempt, a)
	}
}

func approvalCount(t *testing.T, s idem.Store) int {
	t.Helper()
	list, err := s.ListApprovals(ctx(t), idem.ListApprovalsParams{Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func testApprovalRequestKeyWithRecord(t *testing.T, e *env) {
	s := e.s(t)
	a := approvedApproval(t, e, "agent-1", fpOne)
	p := reserveParams(scopeA, "k", fpOne)
	p.ApprovalID = a.ID
	res := mustReserve(t, s, p)
	// In flight, then completed: the record is reported, nothing created,
	// whatever the fingerprint of the request.
	_, err := s.RequestApproval(ctx(t), keyedApprovalParams("k", fpOne))
	wantAttemptExists(t, err, res.Attempt)
	done, err := s.Complete(ctx(t), completeParams(res.Attempt, 200, `{"ok":true}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, fp := range []string{fpOne, fpTwo} {
		_, err := s.RequestApproval(ctx(t), keyedApprovalParams("k", fp))
		wantAttemptExists(t, err, done)
	}
	if n := approvalCount(t, s); n != 1 {
		t.Fatalf("%d approvals, want the one consumed", n)
	}
	// Unkeyed, another key or another requester's key: the approval rules
	// alone (a new pending approval, shared by agent-1's two requests).
	for _, p := range []idem.RequestApprovalParams{
		approvalParams("acme", "agent-1", fpOne),
		keyedApprovalParams("other", fpOne),
		func() idem.RequestApprovalParams {
			p := approvalParams("acme", "agent-2", fpOne)
			p.Key = "k"
			return p
		}(),
	} {
		if got, err := s.RequestApproval(ctx(t), p); err != nil || got.Approval.Status != idem.ApprovalPending {
			t.Fatalf("RequestApproval(%+v) = %+v, %v; want a pending approval", p, got, err)
		}
	}
	// A forgotten record does not count.
	e.clock.Advance(keepFor + time.Hour)
	if got, err := s.RequestApproval(ctx(t), keyedApprovalParams("k", fpOne)); err != nil || !got.Created {
		t.Fatalf("RequestApproval after retention = created %v, %v; want a new pending approval", got.Created, err)
	}
}

// Reservations consuming an approved approval race keyed approval requests
// of the same key and intent, on two instances: a request sees either the
// approval still approved (the reservation has not run) or the record
// (it has), never the approval consumed without the record, so none
// creates a new approval.
func testKeyedApprovalRequestRacingReserve(t *testing.T, e *env) {
	stores := instances(t, e)
	for round := range 8 {
		key := newID("race-")
		a := approvedApproval(t, e, "agent-1", fpOne)
		var wg sync.WaitGroup
		start := make(chan struct{})
		reserved := make([]bool, racers)
		errs := make([]error, racers)
		got := make([]idem.RequestApprovalResult, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := stores[i%len(stores)]
				<-start
				if i%4 == 0 {
					p := reserveParams(scopeA, key, fpOne)
					p.ApprovalID = a.ID
					var res idem.ReserveResult
					res, errs[i] = s.Reserve(ctx(t), p)
					reserved[i] = res.Reserved
					return
				}
				got[i], errs[i] = s.RequestApproval(ctx(t), keyedApprovalParams(key, fpOne))
			}()
		}
		close(start)
		wg.Wait()
		winners := 0
		for i := range racers {
			switch {
			case i%4 == 0:
				if errs[i] != nil {
					t.Fatalf("round %d: Reserve: %v", round, errs[i])
				}
				if reserved[i] {
					winners++
				}
			case errors.Is(errs[i], idem.ErrAttemptExists):
			case errs[i] != nil:
				t.Fatalf("round %d: RequestApproval: %v", round, errs[i])
			case got[i].Created || got[i].Approval.ID != a.ID || got[i].Approval.Status != idem.ApprovalApproved:
				t.Fatalf("round %d: RequestApproval = %+v, want the approved %s or the record", round, got[i], a.ID)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d reservations, want 1", round, winners)
		}
		if n := approvalCount(t, stores[0]); n != round+1 {
			t.Fatalf("round %d: %d approvals, want %d", round, n, round+1)
		}
	}
}
