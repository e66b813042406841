package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// policiesYAML is the policy file of TestProxyPolicies: approval for big
// payouts, a deny by argument and upstream (UPSTREAM: --upstream), and a
// rate limit per principal.
const policiesYAML = `policies:
  - name: big-payouts
    operations: ["createPayout"]
    when: 'args.amount > 1000'
    outcome: require_approval
    reason: "Payouts over 1000 need a person."
  - name: no-forbidden-items
    operations: ["create*"]
    when: 'operation.upstream == "UPSTREAM" && has(args.item) && args.item == "forbidden"'
    outcome: deny
    reason: "That item is not for sale."
limits:
  - name: widgets-per-agent
    per: principal
    operations: ["createWidget"]
    rate: 1/s
    burst: 1
`

// TestProxyPolicies runs idem proxy in front of the Python upstream with a
// policy file (SPEC §8.1): a payout over 1000 needs an approval that names
// its rule and reason over the API and runs once when approved; a denied
// call names its rule; a call beyond the rate limit is 429 with
// Retry-After and its same-key retry after the wait runs once; a broken
// file on SIGHUP keeps the running rules, a good one replaces them.
func TestProxyPolicies(t *testing.T) {
	up := startUpstream(t)
	dir := writeServerDir(t, proxyToken, proxyApprover, `createPayout:
  kind: same_key_replay
  reconcile: listWidgets
  rationale: A payout replays by key.
  sideEffect: external
  approval: policy
createOrder:
  kind: same_key_replay
  reconcile: listWidgets
  rationale: An order replays by key.
`)
	policies := filepath.Join(dir, "policies.yaml")
	file := strings.ReplaceAll(policiesYAML, "UPSTREAM", up.url)
	if err := os.WriteFile(policies, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), up.url, "--policies", policies)
	post := func(path, key, body string) reply {
		return p.do(t, "POST", path, proxyToken, body, "Idempotency-Key", key)
	}

	t.Run("a payout over 1000 needs an approval that names its rule", func(t *testing.T) {
		post("/payouts", "pay-small", `{"amount":10}`).want(t, 201, "")
		r := post("/payouts", "pay-big", `{"amount":5000}`).want(t, 403, "APPROVAL_REQUIRED")
		id, _ := r.get("details.approvalId").(string)
		if r.get("details.rule") != "big-payouts" || r.get("details.reason") != "Payouts over 1000 need a person." || id == "" {
			t.Fatalf("approval answer %s", r.raw)
		}
		a := p.do(t, "GET", "/v1/approvals/"+id, proxyApprover, "").want(t, 200, "")
		if a.get("data.rule") != "big-payouts" || a.get("data.reason") != "Payouts over 1000 need a person." || a.get("data.input.amount") != 5000.0 {
			t.Fatalf("approval %s", a.raw)
		}
		list := p.do(t, "GET", "/v1/approvals?status=pending", proxyApprover, "").want(t, 200, "")
		if !strings.Contains(string(list.raw), `"rule":"big-payouts"`) {
			t.Fatalf("pending approvals %s", list.raw)
		}
		if n := up.stats(t).effects("payout"); n != 1 {
			t.Fatalf("%d payouts before the approval; want the small one only", n)
		}
		p.do(t, "POST", "/v1/approvals/"+id+"/approve", proxyApprover, `{}`).want(t, 200, "")
		post("/payouts", "pay-big", `{"amount":5000}`).want(t, 201, "")
		again := post("/payouts", "pay-big", `{"amount":5000}`).want(t, 201, "")
		if again.header.Get("Idempotent-Replayed") != "true" || up.stats(t).effects("payout") != 2 {
			t.Fatalf("the approved payout ran %d payouts in all, replay %v", up.stats(t).effects("payout"), again.header)
		}
		x := p.do(t, "GET", "/v1/executions/"+again.header.Get("Idem-Execution-Id"), proxyApprover, "").want(t, 200, "")
		if !strings.Contains(string(x.raw), `"type":"policy.decided","at"`) || !strings.Contains(string(x.raw), `"rule":"big-payouts"`) {
			t.Fatalf("the execution's audit lacks the decision: %s", x.raw)
		}
	})

	t.Run("a denied call names its rule and never reaches the upstream", func(t *testing.T) {
		r := post("/orders", "ord-no", `{"item":"forbidden"}`).want(t, 403, "POLICY_DENIED")
		if r.get("details.rule") != "no-forbidden-items" || !strings.Contains(r.get("detail").(string), "That item is not for sale.") {
			t.Fatalf("deny %s", r.raw)
		}
		post("/orders", "ord-ok", `{"item":"anvil"}`).want(t, 201, "")
		if n := up.stats(t).effects("order"); n != 1 {
			t.Fatalf("%d orders; want 1", n)
		}
	})

	t.Run("a call beyond the limit is 429 with Retry-After; its retry runs once", func(t *testing.T) {
		var limited reply
		var key string
		for i := 0; i < 10 && limited.status != 429; i++ {
			key = "w-" + strconv.Itoa(i)
			limited = post("/widgets", key, `{"name":"w`+strconv.Itoa(i)+`"}`)
		}
		limited.want(t, 429, "RATE_LIMITED")
		if limited.get("details.limit") != "widgets-per-agent" || limited.header.Get("Retry-After") != "1" {
			t.Fatalf("429 %v %s", limited.header, limited.raw)
		}
		p.do(t, "GET", "/v1/attempts/"+key, proxyToken, "").want(t, 404, "NOT_FOUND")
		before := up.stats(t).effects("widget")
		// As a client honouring Retry-After does, wait, then retry the key.
		time.Sleep(time.Second)
		post("/widgets", key, `{"name":"retry"}`).want(t, 201, "")
		if after := up.stats(t).effects("widget"); after != before+1 {
			t.Fatalf("the retry ran %d widget effects; want 1", after-before)
		}
		metrics := p.do(t, "GET", "/metrics", "", "")
		if !strings.Contains(string(metrics.raw), `idem_rate_limited_total{limit="widgets-per-agent",operation="createWidget"} 1`) {
			t.Errorf("metrics lack the limited call:\n%s", metrics.raw)
		}
	})

	t.Run("SIGHUP: a broken file keeps the rules, a good one replaces them", func(t *testing.T) {
		if err := os.WriteFile(policies, []byte(strings.Replace(file, "args.item ==", "args.item >", 1)+"  oops: [\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p.cmd.Process.Signal(syscall.SIGHUP)
		waitLog(t, p, "policies not reloaded", 1)
		post("/orders", "ord-no-2", `{"item":"forbidden"}`).want(t, 403, "POLICY_DENIED")
		if err := os.WriteFile(policies, []byte("policies: []\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p.cmd.Process.Signal(syscall.SIGHUP)
		waitLog(t, p, `"msg":"policies reloaded"`, 1)
		post("/orders", "ord-no-3", `{"item":"forbidden"}`).want(t, 201, "")
	})
}

// waitLog waits until the server's log holds text n times.
func waitLog(t *testing.T, s *server, text string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(s.logs(), text) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", text, s.logs())
		}
	}
}

// TestServePoliciesReload: idem serve --demo --policies reloads its file on
// SIGHUP (it has no operations to reload): a broken file keeps the running
// rules, a good one replaces them.
func TestServePoliciesReload(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yaml")
	write := func(yaml string) {
		if err := os.WriteFile(policies, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`policies: [{name: no-refunds, operations: ["order.refund"], outcome: deny, reason: "No refunds today."}]`)
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir, "--policies", policies)
	refund := func(key string) reply {
		return s.do(t, "POST", "/v1/orders/ord_1/refund", "demo-agent", `{"amount":10}`, "Idempotency-Key", key)
	}
	if r := refund("r-1").want(t, 403, "POLICY_DENIED"); r.get("details.rule") != "no-refunds" {
		t.Fatalf("deny %s", r.raw)
	}
	write(`policies: [{name: no-refunds, operations: ["order.refnd"], outcome: deny}]`)
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, s, "policies not reloaded", 1)
	if !strings.Contains(s.logs(), `no operation named \"order.refnd\"`) {
		t.Errorf("the refusal does not say why:\n%s", s.logs())
	}
	refund("r-2").want(t, 403, "POLICY_DENIED")
	write(`policies: []`)
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, s, `"msg":"policies reloaded"`, 1)
	refund("r-3").want(t, 200, "")
}
