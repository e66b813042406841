package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

func init() {
	register("ApprovalRequestIsReused", testApprovalReused)
	register("ApprovalRequestConcurrentOneCreated", testApprovalConcurrentRequest)
	register("ApprovalApproveAndConsume", testApprovalApproveAndConsume)
	register("ApprovalBindsItsIntent", testApprovalBindsIntent)
	register("ApprovalRejectedUntilExpiry", testApprovalRejected)
	register("ApprovalDecisionRules", testApprovalDecisionRules)
	register("ApprovalExpiry", testApprovalExpiry)
	register("ApprovalVisibilityAndList", testApprovalList)
	register("ApprovalKeepsItsRule", testApprovalRule)
}

// An approval a configured rule asked for keeps the rule's name and
// approver role through every read and a decision (SPEC §8.1).
func testApprovalRule(t *testing.T, e *env) {
	s := e.s(t)
	p := approvalParams("acme", "agent-1", fpOne)
	p.Rule, p.ApproverRole = "big-refunds", "finance"
	a, _ := mustRequest(t, s, p)
	check := func(what string, a idem.Approval) {
		t.Helper()
		if a.Rule != "big-refunds" || a.ApproverRole != "finance" || a.DecidedByRole() != "finance" {
			t.Errorf("%s: rule %q, approver role %q", what, a.Rule, a.ApproverRole)
		}
	}
	check("requested", a)
	got, err := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: a.ID})
	if err != nil {
		t.Fatal(err)
	}
	check("read", got)
	list, err := s.ListApprovals(ctx(t), idem.ListApprovalsParams{Org: "acme"})
	if err != nil || len(list) != 1 {
		t.Fatalf("list %v, %v", list, err)
	}
	check("listed", list[0])
	check("decided", mustDecide(t, s, "acme", a.ID, true, "fiona", ""))
	plain, _ := mustRequest(t, s, approvalParams("acme", "agent-1", fpTwo))
	if plain.Rule != "" || plain.DecidedByRole() != idem.RoleApprover {
		t.Errorf("an approval without a rule: rule %q, role %q", plain.Rule, plain.DecidedByRole())
	}
	b, _ := json.Marshal(a)
	if !strings.Contains(string(b), `"rule":"big-refunds"`) || strings.Contains(string(b), "finance") {
		t.Errorf("wire form %s: want rule, and no approver role", b)
	}
}

const approvalExpiry = 15 * time.Minute

func approvalParams(org, requester, fingerprint string) idem.RequestApprovalParams {
	return idem.RequestApprovalParams{
		ID:          newID("apr_"),
		Org:         org,
		RequestedBy: requester,
		Operation:   "order.refund",
		Fingerprint: fingerprint,
		Input:       json.RawMessage(`{"amount":6000,"id":"ord_1"}`),
		Reason:      "refunds over 5000 need approval",
		Expiry:      approvalExpiry,
	}
}

func mustRequest(t *testing.T, s idem.Store, p idem.RequestApprovalParams) (idem.Approval, bool) {
	t.Helper()
	res, err := s.RequestApproval(ctx(t), p)
	if err != nil {
		t.Fatalf("RequestApproval: %v", err)
	}
	return res.Approval, res.Created
}

func mustDecide(t *testing.T, s idem.Store, org, id string, approve bool, by, reason string) idem.Approval {
	t.Helper()
	a, err := s.DecideApproval(ctx(t), idem.DecideApprovalParams{Org: org, ID: id, Decision: idem.Decision{Approve: approve, By: by, Reason: reason}})
	if err != nil {
		t.Fatalf("DecideApproval(%s, approve=%v): %v", id, approve, err)
	}
	return a
}

// approvedApproval requests and approves an approval for agent-1's intent.
func approvedApproval(t *testing.T, e *env, requester, fingerprint string) idem.Approval {
	t.Helper()
	a, _ := mustRequest(t, e.s(t), approvalParams("acme", requester, fingerprint))
	return mustDecide(t, e.s(t), "acme", a.ID, true, "bob", "")
}

func testApprovalReused(t *testing.T, e *env) {
	s := e.s(t)
	p := approvalParams("acme", "agent-1", fpOne)
	a, created := mustRequest(t, s, p)
	now := e.clock.Now()
	if !created || a.ID != p.ID || a.Status != idem.ApprovalPending || a.RequestedBy != "agent-1" || a.Operation != "order.refund" ||
		a.Fingerprint != fpOne || a.Reason != p.Reason || !a.CreatedAt.Equal(now) || !a.ExpiresAt.Equal(now.Add(approvalExpiry)) ||
		a.DecidedBy != nil || a.DecidedAt != nil || a.ConsumedAt != nil || a.ExecutionID != nil {
		t.Fatalf("new approval = %+v (created %v)", a, created)
	}
	if string(a.Input) != `{"amount":6000,"id":"ord_1"}` {
		t.Errorf("input = %s", a.Input)
	}
	e.clock.Advance(time.Minute)
	b, created := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne))
	if created || b.ID != a.ID {
		t.Fatalf("same intent again created %v, id %s; want the pending %s reused", created, b.ID, a.ID)
	}
	for _, p := range []idem.RequestApprovalParams{
		approvalParams("acme", "agent-1", fpTwo),   // another input
		approvalParams("acme", "agent-2", fpOne),   // another requester
		approvalParams("globex", "agent-1", fpOne), // another org
	} {
		if c, created := mustRequest(t, s, p); !created || c.ID == a.ID {
			t.Errorf("another intent %+v reused %s", p, a.ID)
		}
	}
}

func testApprovalConcurrentRequest(t *testing.T, e *env) {
	stores := instances(t, e)
	ids := make([]string, 16)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := stores[i%2].RequestApproval(ctx(t), approvalParams("acme", "agent-1", fpOne))
			if err != nil {
				t.Errorf("RequestApproval: %v", err)
			}
			ids[i] = res.Approval.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent requests for one intent got approvals %v, want one", ids)
		}
	}
}

func testApprovalApproveAndConsume(t *testing.T, e *env) {
	s := e.s(t)
	a, _ := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne))
	e.clock.Advance(time.Minute)
	approved := mustDecide(t, s, "acme", a.ID, true, "bob", "fine")
	if approved.Status != idem.ApprovalApproved || approved.DecidedBy == nil || *approved.DecidedBy != "bob" ||
		approved.DecisionReason == nil || *approved.DecisionReason != "fine" || approved.DecidedAt == nil || !approved.DecidedAt.Equal(e.clock.Now()) {
		t.Fatalf("approved = %+v", approved)
	}
	// The live approval of the intent is now the approved one.
	if again, created := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne)); created || again.Status != idem.ApprovalApproved {
		t.Fatalf("request after approval = %+v, created %v", again, created)
	}
	p := reserveParams(scopeA, "key-1", fpOne)
	p.ApprovalID = a.ID
	res := mustReserve(t, s, p)
	got, err := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: a.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != idem.ApprovalConsumed || got.ExecutionID == nil || *got.ExecutionID != res.Attempt.ExecutionID || got.ConsumedAt == nil {
		t.Fatalf("consumed approval = %+v", got)
	}
	exe, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: res.Attempt.ExecutionID})
	if err != nil {
		t.Fatal(err)
	}
	if types := eventTypes(exe); len(types) != 2 || types[0] != idem.EventStarted || types[1] != idem.EventApprovalConsumed {
		t.Errorf("events = %v, want [started approval.consumed]", types)
	}
	// Consumed: never again, not even for the same intent under a new key;
	// a new request opens a new approval.
	p2 := reserveParams(scopeA, "key-2", fpOne)
	p2.ApprovalID = a.ID
	if _, err := s.Reserve(ctx(t), p2); !errors.Is(err, idem.ErrApprovalNotConsumable) {
		t.Fatalf("second consumption: err = %v, want ErrApprovalNotConsumable", err)
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-2"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a failed consumption left a reservation: %v", err)
	}
	if next, created := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne)); !created || next.ID == a.ID {
		t.Fatalf("request after consumption reused %s", a.ID)
	}
	// Unkeyed executions consume approvals the same way.
	b := approvedApproval(t, e, "agent-1", fpTwo)
	start := idem.StartParams{ExecutionID: newID("exe_"), Scope: scopeA, Operation: "order.refund", Fingerprint: fpTwo, ApprovalID: b.ID}
	if _, err := s.StartExecution(ctx(t), start); err != nil {
		t.Fatal(err)
	}
	start.ExecutionID = newID("exe_")
	if _, err := s.StartExecution(ctx(t), start); !errors.Is(err, idem.ErrApprovalNotConsumable) {
		t.Fatalf("second unkeyed consumption: err = %v", err)
	}
	if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: start.ExecutionID}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a failed consumption left an execution: %v", err)
	}
}

func testApprovalBindsIntent(t *testing.T, e *env) {
	s := e.s(t)
	a := approvedApproval(t, e, "agent-1", fpOne)
	wrong := map[string]idem.ReserveParams{}
	p := reserveParams(scopeA, "k1", fpTwo)
	wrong["another fingerprint"] = p
	p = reserveParams(scopeB, "k2", fpOne)
	wrong["another principal"] = p
	p = reserveParams(scopeA, "k3", fpOne)
	p.Operation = "business.create"
	wrong["another operation"] = p
	p = reserveParams(idem.Scope{Org: "globex", Principal: "agent-1"}, "k4", fpOne)
	wrong["another org"] = p
	for name, p := range wrong {
		p.ApprovalID = a.ID
		if _, err := s.Reserve(ctx(t), p); !errors.Is(err, idem.ErrApprovalNotConsumable) {
			t.Errorf("%s: err = %v, want ErrApprovalNotConsumable", name, err)
		}
	}
	p = reserveParams(scopeA, "k5", fpOne)
	p.ApprovalID = "apr_unknown"
	if _, err := s.Reserve(ctx(t), p); !errors.Is(err, idem.ErrApprovalNotConsumable) {
		t.Errorf("unknown approval: err = %v", err)
	}
	pending, _ := mustRequest(t, s, approvalParams("acme", "agent-2", fpOne))
	p = reserveParams(scopeB, "k6", fpOne)
	p.ApprovalID = pending.ID
	if _, err := s.Reserve(ctx(t), p); !errors.Is(err, idem.ErrApprovalNotConsumable) {
		t.Errorf("pending approval consumed: err = %v", err)
	}
	if got, _ := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: a.ID}); got.Status != idem.ApprovalApproved {
		t.Errorf("approval after failed consumptions = %s, want still approved", got.Status)
	}
}

func testApprovalRejected(t *testing.T, e *env) {
	s := e.s(t)
	a, _ := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne))
	rejected := mustDecide(t, s, "acme", a.ID, false, "bob", "too much")
	if rejected.Status != idem.ApprovalRejected || *rejected.DecisionReason != "too much" {
		t.Fatalf("rejected = %+v", rejected)
	}
	e.clock.Advance(approvalExpiry - time.Microsecond)
	if again, created := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne)); created || again.ID != a.ID || again.Status != idem.ApprovalRejected {
		t.Fatalf("re-send before expiry = %+v (created %v), want the rejected approval", again, created)
	}
	e.clock.Advance(time.Microsecond)
	if got, _ := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: a.ID}); got.Status != idem.ApprovalRejected {
		t.Errorf("rejected approval past expiry reads %s, want rejected", got.Status)
	}
	if next, created := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne)); !created || next.ID == a.ID || next.Status != idem.ApprovalPending {
		t.Fatalf("re-send after expiry = %+v (created %v), want a new pending approval", next, created)
	}
}

func testApprovalDecisionRules(t *testing.T, e *env) {
	s := e.s(t)
	a, _ := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne))
	first := mustDecide(t, s, "acme", a.ID, true, "bob", "ok")
	e.clock.Advance(time.Minute)
	repeat := mustDecide(t, s, "acme", a.ID, true, "carol", "again")
	if *repeat.DecidedBy != "bob" || !repeat.DecidedAt.Equal(*first.DecidedAt) || *repeat.DecisionReason != "ok" {
		t.Fatalf("repeated decision changed the approval: %+v", repeat)
	}
	_, err := s.DecideApproval(ctx(t), idem.DecideApprovalParams{Org: "acme", ID: a.ID, Decision: idem.Decision{Approve: false, By: "carol"}})
	if idem.ErrorCode(err) != idem.CodeApprovalAlreadyDecided {
		t.Fatalf("reject after approve: err = %v, want APPROVAL_ALREADY_DECIDED", err)
	}
	// Still the same after consumption and after expiry.
	p := reserveParams(scopeA, "key-1", fpOne)
	p.ApprovalID = a.ID
	mustReserve(t, s, p)
	if got := mustDecide(t, s, "acme", a.ID, true, "carol", ""); got.Status != idem.ApprovalConsumed || *got.DecidedBy != "bob" {
		t.Fatalf("approve after consumption = %+v", got)
	}
	e.clock.Advance(approvalExpiry)
	if got := mustDecide(t, s, "acme", a.ID, true, "carol", ""); got.Status != idem.ApprovalConsumed {
		t.Fatalf("approve after consumption and expiry = %+v", got)
	}

	for _, id := range []string{"apr_unknown", a.ID} {
		org := "globex"
		if id == "apr_unknown" {
			org = "acme"
		}
		_, err := s.DecideApproval(ctx(t), idem.DecideApprovalParams{Org: org, ID: id, Decision: idem.Decision{Approve: true, By: "bob"}})
		if idem.ErrorCode(err) != idem.CodeApprovalNotFound {
			t.Errorf("decide %s in %s: err = %v, want APPROVAL_NOT_FOUND", id, org, err)
		}
		if _, err := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: org, ID: id}); idem.ErrorCode(err) != idem.CodeApprovalNotFound {
			t.Errorf("get %s in %s: err = %v, want APPROVAL_NOT_FOUND", id, org, err)
		}
	}
}

func testApprovalExpiry(t *testing.T, e *env) {
	s := e.s(t)
	pending, _ := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne))
	approved := approvedApproval(t, e, "agent-1", fpTwo)
	e.clock.Advance(approvalExpiry)
	for _, id := range []string{pending.ID, approved.ID} {
		if got, _ := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: id}); got.Status != idem.ApprovalExpired {
			t.Errorf("approval %s past expiry reads %s, want expired", id, got.Status)
		}
	}
	_, err := s.DecideApproval(ctx(t), idem.DecideApprovalParams{Org: "acme", ID: pending.ID, Decision: idem.Decision{Approve: true, By: "bob"}})
	if idem.ErrorCode(err) != idem.CodeApprovalExpired {
		t.Fatalf("approving an expired pending approval: err = %v, want APPROVAL_EXPIRED", err)
	}
	p := reserveParams(scopeA, "key-1", fpTwo)
	p.ApprovalID = approved.ID
	if _, err := s.Reserve(ctx(t), p); !errors.Is(err, idem.ErrApprovalNotConsumable) {
		t.Fatalf("an expired approval authorized a reservation: err = %v", err)
	}
	sw, err := s.Sweep(ctx(t), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sw.ApprovalsExpired != 2 {
		t.Errorf("Sweep expired %d approvals, want 2", sw.ApprovalsExpired)
	}
	if got := mustDecide(t, s, "acme", approved.ID, true, "bob", ""); got.Status != idem.ApprovalExpired || *got.DecidedBy != "bob" {
		t.Errorf("repeating approve on an expired approved approval = %+v", got)
	}
	if next, created := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne)); !created || next.ID == pending.ID {
		t.Errorf("request after expiry reused the expired approval")
	}
}

func testApprovalList(t *testing.T, e *env) {
	s := e.s(t)
	a1, _ := mustRequest(t, s, approvalParams("acme", "agent-1", fpOne))
	e.clock.Advance(time.Second)
	a2, _ := mustRequest(t, s, approvalParams("acme", "agent-2", fpOne))
	e.clock.Advance(time.Second)
	a3, _ := mustRequest(t, s, approvalParams("acme", "agent-1", fpTwo))
	mustDecide(t, s, "acme", a3.ID, false, "bob", "no")
	mustRequest(t, s, approvalParams("globex", "agent-9", fpOne))

	ids := func(p idem.ListApprovalsParams) []string {
		list, err := s.ListApprovals(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range list {
			out = append(out, a.ID)
		}
		return out
	}
	check := func(name string, got, want []string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
			return
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s = %v, want %v", name, got, want)
				return
			}
		}
	}
	check("all of acme", ids(idem.ListApprovalsParams{Org: "acme"}), []string{a3.ID, a2.ID, a1.ID})
	check("agent-1's", ids(idem.ListApprovalsParams{Org: "acme", RequestedBy: "agent-1"}), []string{a3.ID, a1.ID})
	check("pending", ids(idem.ListApprovalsParams{Org: "acme", Status: idem.ApprovalPending}), []string{a2.ID, a1.ID})
	check("rejected", ids(idem.ListApprovalsParams{Org: "acme", Status: idem.ApprovalRejected}), []string{a3.ID})
	check("limit", ids(idem.ListApprovalsParams{Org: "acme", Limit: 1}), []string{a3.ID})
	e.clock.Advance(approvalExpiry)
	check("pending after expiry", ids(idem.ListApprovalsParams{Org: "acme", Status: idem.ApprovalPending}), nil)
	check("expired", ids(idem.ListApprovalsParams{Org: "acme", Status: idem.ApprovalExpired}), []string{a2.ID, a1.ID})
}
