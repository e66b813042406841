package webui

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/policyfile"
)

var decideButton = regexp.MustCompile(`<button type="submit" name="decision" value="(approve|reject)"`)

func TestInboxForApprover(t *testing.T) {
	f := newFixture(t)
	id := f.requestApproval(agent, "k1")
	cookie := f.signin("t-bob")
	a := f.do("GET", "/ui/approvals", nil, cookie)
	for _, want := range []string{id, "order.refund", `class="requester">agent-1<`, "data-expires=", "&#34;amount&#34;: 6000", "refunds over 5000 need approval", `class="fingerprint"`} {
		if !strings.Contains(a.body, want) {
			t.Errorf("inbox lacks %q", want)
		}
	}
	if n := len(decideButton.FindAllString(a.body, -1)); n != 2 {
		t.Fatalf("inbox has %d decide buttons, want approve and reject", n)
	}
	if a := f.do("GET", "/ui/approvals?tab=history", nil, cookie); strings.Contains(a.body, id) {
		t.Fatal("a pending approval is in the history tab")
	}
	token := f.csrf(cookie)
	f.do("POST", "/ui/approvals/"+id+"/decide", url.Values{"decision": {"reject"}, "reason": {"too much"}, "csrf": {token}}, cookie)
	if a := f.do("GET", "/ui/approvals", nil, cookie); strings.Contains(a.body, id) {
		t.Fatal("a rejected approval is still pending in the inbox")
	}
	h := f.do("GET", "/ui/approvals?tab=history", nil, cookie)
	if !strings.Contains(h.body, id) || !strings.Contains(h.body, "too much") || decideButton.MatchString(h.body) {
		t.Fatalf("history tab = %s", h.body)
	}
	// An approved request the agent then ran is in the history as consumed.
	second, _ := f.refund(agent, 7000, "k2")["details"].(map[string]any)["approvalId"].(string)
	f.do("POST", "/ui/approvals/"+second+"/decide", url.Values{"decision": {"approve"}, "csrf": {token}}, cookie)
	if out := f.refund(agent, 7000, "k2"); out["data"] == nil {
		t.Fatalf("the approved retry did not run: %v", out)
	}
	h = f.do("GET", "/ui/approvals?tab=history", nil, cookie)
	if !strings.Contains(h.body, `status-consumed">consumed<`) || strings.Index(h.body, second) > strings.Index(h.body, id) {
		t.Fatalf("history tab lacks the consumed approval first: %s", h.body)
	}
	// Deciding it the other way is refused by the runner, shown with its code.
	a = f.do("POST", "/ui/approvals/"+id+"/decide", url.Values{"decision": {"approve"}, "csrf": {token}}, cookie)
	wantError(t, a, 409, idem.CodeApprovalAlreadyDecided)
	wantError(t, f.do("POST", "/ui/approvals/"+id+"/decide", url.Values{"decision": {"maybe"}, "csrf": {token}}, cookie), 400, idem.CodeInvalidInput)
}

func TestSelfApprovalExplainedAndRefused(t *testing.T) {
	f := newFixture(t)
	id := f.requestApproval(bob, "own-1")
	cookie := f.signin("t-bob")
	a := f.do("GET", "/ui/approvals/"+id, nil, cookie)
	if decideButton.MatchString(a.body) || !strings.Contains(a.body, "disabled") || !strings.Contains(a.body, "SELF_APPROVAL_FORBIDDEN") {
		t.Fatalf("own request page = %s", a.body)
	}
	// A crafted POST is refused by the runner's rule.
	a = f.do("POST", "/ui/approvals/"+id+"/decide", url.Values{"decision": {"approve"}, "csrf": {f.csrf(cookie)}}, cookie)
	wantError(t, a, 403, idem.CodeSelfApprovalForbidden)
}

func TestNonApproverSeesNoDecideButtons(t *testing.T) {
	f := newFixture(t)
	f.requestApproval(agent, "k1") // not alice's: invisible to her
	own := f.requestApproval(alice, "alice-1")
	cookie := f.signin("t-alice")
	a := f.do("GET", "/ui/approvals", nil, cookie)
	if !strings.Contains(a.body, own) || strings.Count(a.body, `<article class="card"`) != 1 {
		t.Fatalf("alice's inbox = %s", a.body)
	}
	if decideButton.MatchString(a.body) || strings.Contains(a.body, `action="/ui/approvals/`+own+`/decide"`) {
		t.Fatal("a non-approver sees decide buttons")
	}
	if !strings.Contains(a.body, "Only holders of the <code>approver</code> role") {
		t.Fatal("the missing buttons are not explained")
	}
	a = f.do("POST", "/ui/approvals/"+own+"/decide", url.Values{"decision": {"approve"}, "csrf": {f.csrf(cookie)}}, cookie)
	wantError(t, a, 403, idem.CodeForbidden)
}

func TestOtherOrgSeesNothing(t *testing.T) {
	f := newFixture(t)
	id := f.requestApproval(agent, "k1")
	cookie := f.signin("t-gina")
	if a := f.do("GET", "/ui/approvals", nil, cookie); strings.Contains(a.body, id) {
		t.Fatal("another org's approver sees the approval")
	}
	wantError(t, f.do("GET", "/ui/approvals/"+id, nil, cookie), 404, idem.CodeApprovalNotFound)
	if a := f.do("GET", "/ui/executions", nil, cookie); strings.Contains(a.body, "exe_") {
		t.Fatal("another org's approver sees executions")
	}
}

func TestExecutionExplorer(t *testing.T) {
	f := newFixture(t)
	first := f.refund(alice, 100, "")
	second := f.refund(alice, 100, "") // the same intent again: a re-invocation
	f.refund(agent, 200, "a-1")
	xid := func(out map[string]any) string { return out["meta"].(map[string]any)["executionId"].(string) }

	bobCookie := f.signin("t-bob")
	all := f.do("GET", "/ui/executions", nil, bobCookie)
	if strings.Count(all.body, `<td>order.refund</td>`) != 3 {
		t.Fatalf("approver's explorer = %s", all.body)
	}
	mine := f.do("GET", "/ui/executions?principal=agent-1&operation=order.refund&outcome=succeeded", nil, bobCookie)
	if strings.Count(mine.body, `<td>order.refund</td>`) != 1 || strings.Contains(mine.body, xid(first)) {
		t.Fatalf("filtered explorer = %s", mine.body)
	}

	aliceCookie := f.signin("t-alice")
	own := f.do("GET", "/ui/executions", nil, aliceCookie)
	if strings.Count(own.body, `<td>order.refund</td>`) != 2 || strings.Contains(own.body, ">agent-1<") {
		t.Fatalf("alice's explorer = %s", own.body)
	}
	page := f.do("GET", "/ui/executions/"+xid(second), nil, aliceCookie)
	for _, want := range []string{`id="reinvocation" href="/ui/executions/` + xid(first) + `"`, "ev-started", "ev-succeeded", "Completed"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("execution page lacks %q: %s", want, page.body)
		}
	}
	agentsRun := f.refund(agent, 300, "a-2")
	wantError(t, f.do("GET", "/ui/executions/"+xid(agentsRun), nil, aliceCookie), 404, idem.CodeNotFound)
}

func TestAttemptLookup(t *testing.T) {
	f := newFixture(t)
	f.refund(alice, 100, "alice-key")
	cookie := f.signin("t-alice")
	a := f.do("GET", "/ui/attempts?key=alice-key", nil, cookie)
	if a.status != 200 || !strings.Contains(a.body, "status-completed") || !strings.Contains(a.body, "/ui/executions/exe_") {
		t.Fatalf("attempt page = %d %s", a.status, a.body)
	}
	bob := f.signin("t-bob")
	if a := f.do("GET", "/ui/attempts?key=alice-key", nil, bob); a.status != http.StatusNotFound || !strings.Contains(a.body, "NOT_FOUND") {
		t.Fatalf("another principal's key = %d %s", a.status, a.body)
	}
	if a := f.do("GET", "/ui/attempts?key="+url.QueryEscape("bad key"), nil, cookie); a.status != 400 || !strings.Contains(a.body, "IDEMPOTENCY_KEY_INVALID") {
		t.Fatalf("invalid key = %d %s", a.status, a.body)
	}
}

func TestCatalogPage(t *testing.T) {
	f := newFixture(t)
	a := f.do("GET", "/ui/catalog", nil, f.signin("t-alice"))
	for _, want := range []string{"order.refund", "kind-same_key_replay", "idempotency_reservation", "original_attempt_result", "<code>order.show</code>", "refunds once per key", "kind-fresh_read", "effect-write"} {
		if !strings.Contains(a.body, want) {
			t.Errorf("catalog lacks %q", want)
		}
	}
}

func TestUnknownPage(t *testing.T) {
	f := newFixture(t)
	wantError(t, f.do("GET", "/ui/nope", nil, ""), 404, idem.CodeNotFound)
	if a := f.do("GET", "/ui/static/console.css", nil, ""); a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/css") {
		t.Fatalf("stylesheet = %d %q", a.status, a.header.Get("Content-Type"))
	}
}

func TestTimeline(t *testing.T) {
	code := idem.CodeExecutionFailed
	x := idem.Execution{Key: "k", Outcome: idem.OutcomeFailed, Code: &code, Events: []idem.AuditEvent{
		{Type: idem.EventStarted, Attempt: 1},
		{Type: idem.EventPolicyDecided, Data: map[string]string{"rule": "big-refunds", "outcome": "require_approval"}},
		{Type: idem.EventRetried, Attempt: 2, PreviousErrorCode: idem.CodeTimeout},
		{Type: idem.EventApprovalConsumed, Data: map[string]string{"approvalId": "apr_1"}},
		{Type: idem.EventFailed, Code: code, Attempts: 2, DurationMs: 12, Data: map[string]string{"cause": "the handler panicked"}},
		{Type: idem.EventReplayed, Data: map[string]string{"status": "500"}},
	}}
	for _, c := range []struct {
		name  string
		x     idem.Execution
		kinds string
	}{
		{"keyed 5xx is indeterminate", x, "started policy retried approval indeterminate replayed"},
		{"unkeyed failure is failed", func() idem.Execution { y := x; y.Key = ""; return y }(), "started policy retried approval failed replayed"},
		{"running has no final event", idem.Execution{Outcome: idem.OutcomeRunning, Events: x.Events[:1]}, "started running"},
	} {
		t.Run(c.name, func(t *testing.T) {
			steps := timeline(c.x, indeterminate(c.x))
			var kinds []string
			for _, s := range steps {
				kinds = append(kinds, s.Kind)
			}
			if got := strings.Join(kinds, " "); got != c.kinds {
				t.Fatalf("kinds = %q, want %q", got, c.kinds)
			}
		})
	}
	steps := timeline(x, true)
	if steps[1].Text != "big-refunds: require_approval" || steps[2].Text != "attempt 2 after TIMEOUT" || steps[3].ApprovalID != "apr_1" || steps[4].Cause != "the handler panicked" || !strings.Contains(steps[5].Text, "HTTP 500") {
		t.Fatalf("steps = %+v", steps)
	}
}

// An execution whose reinvocationOf names one removed past the audit
// retention shows the id as text, without a link to a page that would be
// an error; the removed one's own page is NOT_FOUND.
func TestExecutionWhoseReinvocationIsRemoved(t *testing.T) {
	f := newFixture(t)
	first := f.refund(alice, 100, "")
	f.storeClock.Advance(2 * time.Hour)
	second := f.refund(alice, 100, "")
	xid := func(out map[string]any) string { return out["meta"].(map[string]any)["executionId"].(string) }
	if _, err := f.store.Sweep(t.Context(), idem.SweepParams{AuditRetention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cookie := f.signin("t-alice")
	page := f.do("GET", "/ui/executions/"+xid(second), nil, cookie)
	if page.status != 200 || !strings.Contains(page.body, `<code id="reinvocation">`+xid(first)+`</code> (removed`) ||
		strings.Contains(page.body, `href="/ui/executions/`+xid(first)) {
		t.Fatalf("execution page with its reinvocationOf removed: %d %s", page.status, page.body)
	}
	wantError(t, f.do("GET", "/ui/executions/"+xid(first), nil, cookie), 404, idem.CodeNotFound)
}

// TestTimelineShowsTheCause: a failed execution's page shows the final
// event's cause, escaped.
func TestTimelineShowsTheCause(t *testing.T) {
	f := newFixture(t)
	out := f.refund(alice, failingAmount, "")
	if out["code"] != string(codeAlreadyRefunded) {
		t.Fatalf("refund: %v", out)
	}
	id := out["meta"].(map[string]any)["executionId"].(string)
	page := f.do("GET", "/ui/executions/"+id, nil, f.signin("t-alice"))
	want := `<p class="cause">Cause: ALREADY_REFUNDED: &lt;script&gt;alert(1)&lt;/script&gt; was refunded on 2026-11-30</p>`
	if page.status != 200 || !strings.Contains(page.body, want) || strings.Contains(page.body, "<script>alert") {
		t.Fatalf("execution page = %d, want it to hold %s: %s", page.status, want, page.body)
	}
}

// An approval a configured rule asked for shows the rule, its reason and
// the arguments in the inbox, and only the rule's approver role decides it.
func TestInboxShowsConfiguredRule(t *testing.T) {
	f := newFixture(t)
	pf, err := policyfile.Parse([]byte(`
policies:
  - name: big-refunds
    operations: ["order.refund"]
    when: 'args.amount > 1000'
    outcome: require_approval
    approverRole: finance
    reason: "Refunds over 1000 need a person."
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policyfile.Compile(pf, f.runner.Descriptors(), policyfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.runner.SetRules(set)
	out := f.refund(agent, 2500, "k-rule")
	id, _ := out["details"].(map[string]any)["approvalId"].(string)
	a := f.do("GET", "/ui/approvals", nil, f.signin("t-bob"))
	for _, want := range []string{id, `class="rule"><code>big-refunds</code>`, "Refunds over 1000 need a person.", "&#34;amount&#34;: 2500", "<code>finance</code> role"} {
		if !strings.Contains(a.body, want) {
			t.Errorf("inbox lacks %q", want)
		}
	}
	if decideButton.MatchString(a.body) {
		t.Error("an approver without the finance role sees decide buttons")
	}
}
