package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/policyfile"
)

// rulesFixture serves order.refund (whose Go-coded policy asks approval
// over 5000) with configured rules on top.
func rulesFixture(t *testing.T, runs *atomic.Int64, yaml string) *fixture {
	t.Helper()
	f := newFixture(t, []idem.Operation{refundOp(runs), showOp()})
	pf, err := policyfile.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policyfile.Compile(pf, f.runner.Descriptors(), policyfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.runner.SetRules(set)
	return f
}

const refundRules = `
policies:
  - name: big-refunds
    operations: ["order.refund"]
    when: 'args.amount > 1000'
    outcome: require_approval
    approverRole: finance
    reason: "Refunds over 1000 need a person."
  - name: no-refund-13
    operations: ["order.*"]
    when: 'args.amount == 13'
    outcome: deny
    reason: "Unlucky."
  - name: broken-at-run-time
    operations: ["order.refund"]
    when: 'args.amount == 77 && args.id.size() / 0 == 1'
    outcome: deny
limits:
  - name: two-refunds
    per: principal
    operations: ["order.refund"]
    rate: 1/m
    burst: 2
`

// A configured deny names its rule (details.rule) with its reason as the
// message; a rule that fails at run time refuses the call, naming it; an
// approval a rule asks for records the rule and its approver role, which
// alone may decide it; the execution's audit holds each decision.
func TestConfiguredRules(t *testing.T) {
	var runs atomic.Int64
	f := rulesFixture(t, &runs, refundRules)
	ctx := t.Context()

	d := expect(t, f.do(ctx, refundCall(13, "k-13")), 403, idem.CodePolicyDenied)
	if d.Details["rule"] != "no-refund-13" || d.Details["reason"] != "Unlucky." {
		t.Errorf("deny details %v", d.Details)
	}
	d = expect(t, f.do(ctx, refundCall(77, "k-77")), 403, idem.CodePolicyFailed)
	if d.Details["rule"] != "broken-at-run-time" {
		t.Errorf("failed details %v", d.Details)
	}

	d = expect(t, f.do(ctx, refundCall(2000, "k-big")), 403, idem.CodeApprovalRequired)
	if d.Details["rule"] != "big-refunds" || d.Details["reason"] != "Refunds over 1000 need a person." {
		t.Errorf("approval details %v", d.Details)
	}
	id := d.Details["approvalId"].(string)
	a, err := f.runner.GetApproval(ctx, approver, id)
	if err != nil || a.Rule != "big-refunds" || a.ApproverRole != "finance" || a.Reason != "Refunds over 1000 need a person." {
		t.Fatalf("approval %+v, %v", a, err)
	}
	if _, err := f.runner.DecideApproval(ctx, approver, id, true, ""); idem.ErrorCode(err) != idem.CodeForbidden {
		t.Fatalf("an approver without the finance role decided: %v", err)
	}
	finance := idem.Principal{Org: "acme", ID: "fiona", Kind: idem.KindCLISession, Roles: []string{"finance"}}
	if _, err := f.runner.DecideApproval(ctx, finance, id, true, "ok"); err != nil {
		t.Fatal(err)
	}
	d = expect(t, f.do(ctx, refundCall(2000, "k-big")), 200, "")
	if runs.Load() != 1 {
		t.Fatalf("%d runs", runs.Load())
	}
	x, err := f.runner.GetExecution(ctx, approver, d.Meta.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	var decided []string
	for _, ev := range x.Events {
		if ev.Type == idem.EventPolicyDecided {
			decided = append(decided, ev.Data["rule"]+"="+ev.Data["outcome"])
		}
	}
	// The Go-coded refund-limit allows 2000; big-refunds asked approval.
	if want := "big-refunds=require_approval refund-limit=allow"; join(decided) != want {
		t.Errorf("audit decisions %q; want %q", decided, want)
	}
}

func join(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out
}

// A call beyond a configured limit is 429 RATE_LIMITED with its wait,
// before its key is reserved: the same-key retry after the wait runs, once.
func TestConfiguredLimit(t *testing.T) {
	var runs atomic.Int64
	f := rulesFixture(t, &runs, refundRules)
	ctx := t.Context()
	expect(t, f.do(ctx, refundCall(10, "k-1")), 200, "")
	expect(t, f.do(ctx, refundCall(10, "k-2")), 200, "")
	resp := f.do(ctx, refundCall(10, "k-3"))
	d := expect(t, resp, 429, idem.CodeRateLimited)
	if d.Details["limit"] != "two-refunds" || resp.Problem.RetryAfter() != time.Minute {
		t.Fatalf("details %v, retry after %s", d.Details, resp.Problem.RetryAfter())
	}
	if _, err := f.runner.GetAttempt(ctx, agent, "k-3"); idem.ErrorCode(err) != idem.CodeNotFound {
		t.Fatalf("the refused call's key has a record: %v", err)
	}
	// A replay of a completed key is not limited.
	expect(t, f.do(ctx, refundCall(10, "k-1")), 200, "")
	f.clock.Advance(time.Minute)
	expect(t, f.do(ctx, refundCall(10, "k-3")), 200, "")
	expect(t, f.do(ctx, refundCall(10, "k-3")), 200, "")
	if runs.Load() != 3 {
		t.Fatalf("%d runs; want 3", runs.Load())
	}
}

// A reload swaps the rules for later calls.
func TestSetRules(t *testing.T) {
	var runs atomic.Int64
	f := rulesFixture(t, &runs, refundRules)
	expect(t, f.do(t.Context(), refundCall(13, "s-1")), 403, idem.CodePolicyDenied)
	f.runner.SetRules(nil)
	expect(t, f.do(t.Context(), refundCall(13, "s-2")), 200, "")
	var _ pipeline.Rules = (*policyfile.Set)(nil)
}

// The call's span carries stage 6's decisions and the configured rule
// that decided.
func TestConfiguredRulesOnTheSpan(t *testing.T) {
	var runs atomic.Int64
	tr := newTraced(t, []idem.Operation{refundOp(&runs), showOp()})
	pf, err := policyfile.Parse([]byte(refundRules))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policyfile.Compile(pf, tr.runner.Descriptors(), policyfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr.runner.SetRules(set)
	expect(t, tr.do(t.Context(), refundCall(13, "span-13")), 403, idem.CodePolicyDenied)
	wantAttrs(t, tr.callSpan(t, "order.refund"), map[attribute.Key]any{
		"idem.policy.decisions": []string{"no-refund-13=deny", "refund-limit=allow"},
		"idem.policy.rule":      "no-refund-13",
	})
	expect(t, tr.do(t.Context(), refundCall(2000, "span-big")), 403, idem.CodeApprovalRequired)
	wantAttrs(t, tr.callSpan(t, "order.refund"), map[attribute.Key]any{"idem.policy.rule": "big-refunds"})
}

// SPEC §5's order holds with configured rules: a keyed call whose record
// another instance made (so this runner's replay cache cannot answer it)
// is replayed by stage 5 before stage 6's rules and limits are asked,
// even when a limit is spent. Configured rules keep stage 5's read apart
// from the reservation (stage5Folded), which an operation without
// policies of its own would otherwise fold.
func TestConfiguredRulesComeAfterTheReplay(t *testing.T) {
	var runs atomic.Int64
	plain := func() idem.Operation { // no policies of its own
		return idem.Define(refundMeta(), func(ctx context.Context, call *idem.Call, in amountIn) (refundOut, error) {
			runs.Add(1)
			return refundOut{Refunded: in.Amount, Key: call.IdempotencyKey}, nil
		})
	}
	f := newFixture(t, []idem.Operation{plain(), showOp()})
	pf, err := policyfile.Parse([]byte(`
limits:
  - name: one-refund
    per: principal
    operations: ["order.refund"]
    rate: 1/h
    burst: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policyfile.Compile(pf, f.runner.Descriptors(), policyfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.runner.SetRules(set)
	ctx := t.Context()
	other := newFixtureOn(t, f.clock, f.store, []idem.Operation{plain(), showOp()})
	expect(t, other.do(ctx, refundCall(10, "elsewhere")), 200, "") // another instance, no rules
	expect(t, f.do(ctx, refundCall(10, "k-1")), 200, "")           // the limit is spent
	expect(t, f.do(ctx, refundCall(10, "k-2")), 429, idem.CodeRateLimited)
	if resp := f.do(ctx, refundCall(10, "elsewhere")); resp.Status != 200 || !resp.Replayed {
		t.Fatalf("the other instance's record answered %d (replayed %v), want its replay", resp.Status, resp.Replayed)
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs; want 2", runs.Load())
	}
}
