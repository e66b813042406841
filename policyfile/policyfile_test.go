package policyfile_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/policyfile"
)

// catalog is three operations: a refund with a typed input, a file write
// with a nested object, and a read without a schema.
func catalog() []idem.Descriptor {
	return []idem.Descriptor{
		{Metadata: idem.Metadata{Name: "payments.refund", SideEffect: idem.SideEffectWrite, Approval: idem.ApprovalPolicy},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"integer"},"currency":{"type":"string"},"note":{"$ref":"#/$defs/Note"}},"$defs":{"Note":{"type":"object","properties":{"text":{"type":"string"}}}}}`)},
		{Metadata: idem.Metadata{Name: "fs.write_file", SideEffect: idem.SideEffectDestructive},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}}}`)},
		{Metadata: idem.Metadata{Name: "fs.read_file", SideEffect: idem.SideEffectRead}},
	}
}

func compile(t *testing.T, yaml string) (*policyfile.Set, error) {
	t.Helper()
	f, err := policyfile.Parse([]byte(yaml))
	if err != nil {
		return nil, err
	}
	return policyfile.Compile(f, catalog(), policyfile.Options{Upstream: func(string) string { return "files" }})
}

func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // in the message
	}{
		{"syntax error", `policies: [{name: broken, operations: ["payments.refund"], when: "args.amount >", outcome: deny}]`,
			[]string{`"broken"`, "Syntax error"}},
		{"type error", `policies: [{name: cmp, operations: ["payments.refund"], when: 'args.amount > "x"', outcome: deny}]`,
			[]string{`"cmp"`, "payments.refund", "no matching overload"}},
		{"unknown field", `policies: [{name: typo, operations: ["payments.refund"], when: 'args.amout > 1000', outcome: deny}]`,
			[]string{`"typo"`, "payments.refund", "undefined field 'amout'"}},
		{"unknown field of a referenced object", `policies: [{name: deep, operations: ["payments.*"], when: 'args.note.txt == ""', outcome: deny}]`,
			[]string{`"deep"`, "undefined field 'txt'"}},
		{"unknown principal field", `policies: [{name: who, when: 'principal.team == "x"', outcome: deny}]`,
			[]string{`"who"`, "undefined field 'team'"}},
		{"unknown field on every operation a glob matches", `policies: [{name: nowhere, operations: ["fs.*"], sideEffects: [destructive], when: 'args.amount > 1', outcome: deny}]`,
			[]string{`"nowhere"`, "undefined field 'amount'", "no operation it matches"}},
		{"not a bool", `policies: [{name: num, operations: ["payments.refund"], when: 'args.amount', outcome: deny}]`,
			[]string{`"num"`, "must be a bool"}},
		{"runaway expression", `policies: [{name: runaway, operations: ["fs.write_file"], when: 'args.tags.all(a, args.tags.all(b, args.tags.all(c, a + b + c != args.path)))', outcome: deny}]`,
			[]string{`"runaway"`, "estimated cost", "exceeds the limit"}},
		{"unknown tool", `policies: [{name: ghost, operations: ["fs.delete_everything"], outcome: deny}]`,
			[]string{`"ghost"`, `no operation named "fs.delete_everything"`}},
		{"bad glob", `policies: [{name: glob, operations: ["fs.[x"], outcome: deny}]`,
			[]string{`"glob"`, "not a valid glob"}},
		{"unknown side effect", `policies: [{name: se, sideEffects: [mutate], outcome: deny}]`,
			[]string{`"se"`, `"mutate"`}},
		{"unknown outcome", `policies: [{name: maybe, outcome: perhaps}]`,
			[]string{`"maybe"`, `outcome "perhaps"`}},
		{"approver role on a deny", `policies: [{name: role, outcome: deny, approverRole: boss}]`,
			[]string{`"role"`, "approverRole"}},
		{"duplicate name", `policies: [{name: twice, outcome: deny}, {name: twice, outcome: allow}]`,
			[]string{`"twice"`, "used twice"}},
		{"unknown key", `policies: [{name: k, outcome: deny, whenn: "true"}]`,
			[]string{"whenn"}},
		{"bad rate", `limits: [{name: fast, per: principal, rate: 5/d}]`,
			[]string{`"fast"`, "unit"}},
		{"bad per", `limits: [{name: per, per: tenant, rate: 5/s}]`,
			[]string{`"per"`, "tenant"}},
		{"limit on an unknown tool", `limits: [{name: lim, per: org, operations: ["nope.nope"], rate: 5/s}]`,
			[]string{`"lim"`, `no operation named "nope.nope"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := compile(t, tc.yaml)
			if err == nil {
				t.Fatalf("compiled (%v); want an error", s)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

const rules = `
policies:
  - name: writes-stay-in-workspace
    operations: ["fs.write_file"]
    when: '!args.path.startsWith("/srv/workspace/")'
    outcome: deny
    reason: "Writes outside /srv/workspace are not allowed."
  - name: big-refunds
    operations: ["payments.refund"]
    when: 'args.amount > 1000'
    outcome: require_approval
    approverRole: finance
    reason: "Refunds over 1000 need a person."
  - name: ops-may-refund
    operations: ["payments.*"]
    when: '"ops" in principal.roles && operation.upstream == "files"'
    outcome: allow
  - name: no-destroying-on-weekends
    sideEffects: [destructive]
    when: 'has(args.tags) && args.tags.exists(t, t == "weekend")'
    outcome: deny
    reason: "Not on weekends."
  - name: euro-refunds-denied
    operations: ["payments.refund"]
    when: 'has(args.note) && args.note.text == "stop"'
    outcome: deny
    reason: "Stopped."
`

func TestDecide(t *testing.T) {
	s, err := compile(t, rules)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]idem.Metadata{}
	for _, d := range catalog() {
		ops[d.Name] = d.Metadata
	}
	agent := idem.Principal{Org: "acme", ID: "bot", Kind: idem.KindAgent}
	for _, tc := range []struct {
		name, op, args string
		who            idem.Principal
		effect         idem.Effect
		rule, role     string
		rules          []string
	}{
		{"write inside", "fs.write_file", `{"path":"/srv/workspace/a"}`, agent, idem.Allow, "", "", nil},
		{"write outside", "fs.write_file", `{"path":"/etc/passwd"}`, agent, idem.Deny, "writes-stay-in-workspace", "", []string{"writes-stay-in-workspace=deny"}},
		{"side effect class", "fs.write_file", `{"path":"/srv/workspace/a","tags":["weekend"]}`, agent, idem.Deny, "no-destroying-on-weekends", "", []string{"no-destroying-on-weekends=deny"}},
		{"small refund", "payments.refund", `{"amount":10}`, agent, idem.Allow, "", "", nil},
		{"big refund", "payments.refund", `{"amount":5000}`, agent, idem.RequireApproval, "big-refunds", "finance", []string{"big-refunds=require_approval"}},
		{"big refund with 5e3", "payments.refund", `{"amount":5e3}`, agent, idem.RequireApproval, "big-refunds", "finance", []string{"big-refunds=require_approval"}},
		{"allow does not beat approval", "payments.refund", `{"amount":5000}`, idem.Principal{Org: "acme", ID: "o", Roles: []string{"ops"}}, idem.RequireApproval, "big-refunds", "finance",
			[]string{"big-refunds=require_approval", "ops-may-refund=allow"}},
		{"deny beats approval", "payments.refund", `{"amount":5000,"note":{"text":"stop"}}`, agent, idem.Deny, "euro-refunds-denied", "",
			[]string{"big-refunds=require_approval", "euro-refunds-denied=deny"}},
		{"no rule for reads", "fs.read_file", `{"path":"/etc"}`, agent, idem.Allow, "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, rec, err := idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()},
				idem.PolicyInput{Operation: ops[tc.op], Principal: tc.who, RawInput: json.RawMessage(tc.args)})
			if err != nil {
				t.Fatal(err)
			}
			if d.Effect != tc.effect || d.Rule != tc.rule && tc.effect != idem.Allow || d.ApproverRole != tc.role {
				t.Errorf("decision %+v; want %s by %q (approver role %q)", d, tc.effect, tc.rule, tc.role)
			}
			if strings.Join(rec, ",") != strings.Join(tc.rules, ",") {
				t.Errorf("record %q; want %q", rec, tc.rules)
			}
		})
	}
}

// A condition that fails at run time (a field absent from this call)
// fails the call closed, naming the rule.
func TestDecideFailsClosed(t *testing.T) {
	s, err := compile(t, rules)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()},
		idem.PolicyInput{Operation: catalog()[0].Metadata, RawInput: json.RawMessage(`{"currency":"EUR"}`)})
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodePolicyFailed || e.Details["rule"] != "big-refunds" || !strings.Contains(e.Message, "big-refunds") {
		t.Fatalf("got %v; want POLICY_FAILED naming big-refunds", err)
	}
}

// Go-coded and configured policies combine in SPEC §8's order, whichever
// comes first.
func TestOrderWithGoPolicies(t *testing.T) {
	s, err := compile(t, rules)
	if err != nil {
		t.Fatal(err)
	}
	goPolicy := func(e idem.Effect) idem.Policy {
		return idem.Policy{Name: "go-" + string(e), Evaluate: func(context.Context, idem.PolicyInput) (idem.PolicyDecision, error) {
			return idem.PolicyDecision{Effect: e, Reason: "go says " + string(e)}, nil
		}}
	}
	refund := func(amount int) idem.PolicyInput {
		return idem.PolicyInput{Operation: catalog()[0].Metadata, RawInput: json.RawMessage(`{"amount":` + string(rune('0'+amount)) + `000}`)}
	}
	for _, tc := range []struct {
		name     string
		policies []idem.Policy
		in       idem.PolicyInput
		effect   idem.Effect
		rule     string
	}{
		{"go deny beats configured approval", []idem.Policy{s.Policy(), goPolicy(idem.Deny)}, refund(5), idem.Deny, ""},
		{"go deny first, configured approval after", []idem.Policy{goPolicy(idem.Deny), s.Policy()}, refund(5), idem.Deny, ""},
		{"configured approval beats go allow", []idem.Policy{goPolicy(idem.Allow), s.Policy()}, refund(5), idem.RequireApproval, "big-refunds"},
		{"go approval, configured allow", []idem.Policy{goPolicy(idem.RequireApproval), s.Policy()}, refund(1), idem.RequireApproval, ""},
		{"configured deny beats go approval", []idem.Policy{goPolicy(idem.RequireApproval), s.Policy()},
			idem.PolicyInput{Operation: catalog()[1].Metadata, RawInput: json.RawMessage(`{"path":"/etc"}`)}, idem.Deny, "writes-stay-in-workspace"},
		{"all allow", []idem.Policy{goPolicy(idem.Allow), s.Policy()}, refund(1), idem.Allow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _, err := idem.EvaluatePolicies(context.Background(), tc.policies, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if d.Effect != tc.effect || d.Rule != tc.rule {
				t.Errorf("decision %+v; want %s by rule %q", d, tc.effect, tc.rule)
			}
		})
	}
}

func TestMatching(t *testing.T) {
	s, err := compile(t, `
policies:
  - {name: all-payments, operations: ["payments.*"], outcome: require_approval}
  - {name: reads, sideEffects: [read], outcome: deny}
  - {name: fs-destructive, operations: ["fs.*"], sideEffects: [destructive], outcome: deny}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"payments.refund": "all-payments", "fs.read_file": "reads", "fs.write_file": "fs-destructive"}
	for _, d := range catalog() {
		got, _, err := idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()}, idem.PolicyInput{Operation: d.Metadata})
		if err != nil || got.Rule != want[d.Name] {
			t.Errorf("%s: rule %q (%v); want %q", d.Name, got.Rule, err, want[d.Name])
		}
	}
	// An operation the set was not compiled for, that a rule matches,
	// fails closed; one that no rule matches is allowed.
	_, _, err = idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()}, idem.PolicyInput{Operation: idem.Metadata{Name: "payments.new", SideEffect: idem.SideEffectWrite}})
	if idem.AsError(err).Code != idem.CodePolicyFailed {
		t.Errorf("new operation: %v; want POLICY_FAILED", err)
	}
	d, _, err := idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()}, idem.PolicyInput{Operation: idem.Metadata{Name: "mail.send", SideEffect: idem.SideEffectExternal}})
	if err != nil || d.Effect != idem.Allow {
		t.Errorf("unmatched operation: %+v %v; want allow", d, err)
	}
}

func TestLimits(t *testing.T) {
	s, err := compile(t, `
limits:
  - {name: per-agent, per: principal, sideEffects: [write, destructive], rate: 1/m, burst: 2}
  - {name: org-refunds, per: org, operations: ["payments.refund"], rate: 3/m, burst: 3}
`)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	refund, read := catalog()[0].Metadata, catalog()[2].Metadata
	a := idem.Principal{Org: "acme", ID: "a"}
	b := idem.Principal{Org: "acme", ID: "b"}
	for i := range 2 {
		if l := s.Take(a, refund, now); l != nil {
			t.Fatalf("call %d refused by %s", i, l.Limit)
		}
	}
	l := s.Take(a, refund, now)
	if l == nil || l.Limit != "per-agent" || l.RetryAfter != time.Minute {
		t.Fatalf("third call: %+v; want per-agent, 1m", l)
	}
	if e := l.Error(); e.Code != idem.CodeRateLimited || e.Details["retryAfterSeconds"] != 60 {
		t.Errorf("error %+v", e)
	}
	if l := s.Take(a, read, now); l != nil {
		t.Errorf("a read was limited by %s", l.Limit)
	}
	// b's own bucket is full, but the org's has one token left: the
	// refused call took none from b's.
	if l := s.Take(b, refund, now); l != nil {
		t.Fatalf("b refused by %s", l.Limit)
	}
	if l := s.Take(b, refund, now); l == nil || l.Limit != "org-refunds" {
		t.Fatalf("b's second: %+v; want org-refunds", l)
	}
	if l := s.Take(a, refund, now.Add(time.Minute)); l != nil {
		t.Errorf("after Retry-After: refused by %s", l.Limit)
	}
}

// TestLimitsOfAnOperationNotCompiledFor: the limits of an operation the
// set was compiled for are found once; one it was not compiled for (a
// reload declared it, or changed its side effect, before the set
// followed) is matched at the call, as the rules are.
func TestLimitsOfAnOperationNotCompiledFor(t *testing.T) {
	s, err := compile(t, `
limits:
  - {name: payments, per: principal, operations: ["payments.*"], rate: 1/h, burst: 1}
  - {name: reads, per: principal, sideEffects: [read], rate: 1/h, burst: 1}
`)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := idem.Principal{Org: "acme", ID: "a"}
	for _, tc := range []struct {
		m    idem.Metadata
		want string
	}{
		{idem.Metadata{Name: "payments.new", SideEffect: idem.SideEffectWrite}, "payments"},
		{idem.Metadata{Name: "fs.write_file", SideEffect: idem.SideEffectRead}, "reads"}, // compiled as destructive
		{idem.Metadata{Name: "mail.send", SideEffect: idem.SideEffectExternal}, ""},
	} {
		if l := s.Take(a, tc.m, now); l != nil {
			t.Fatalf("%s: the first call refused by %s", tc.m.Name, l.Limit)
		}
		got := ""
		if l := s.Take(a, tc.m, now); l != nil {
			got = l.Limit
		}
		if got != tc.want {
			t.Errorf("%s (%s): the second call refused by %q, want %q (\"\": let through)", tc.m.Name, tc.m.SideEffect, got, tc.want)
		}
	}
}

// TestKeep: a set compiled again from the same limit takes over the old
// set's buckets (a reload does not refill them); a limit whose rate
// changed starts full.
func TestKeep(t *testing.T) {
	const file = `limits: [{name: per-agent, per: principal, rate: 1/h, burst: 1}]`
	old, err := compile(t, file)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	refund, a := catalog()[0].Metadata, idem.Principal{Org: "acme", ID: "a"}
	if l := old.Take(a, refund, now); l != nil {
		t.Fatalf("first call refused by %s", l.Limit)
	}
	same, _ := compile(t, file)
	same.Keep(old)
	if l := same.Take(a, refund, now); l == nil {
		t.Fatal("the same limit compiled again was full: a reload refilled it")
	}
	changed, _ := compile(t, strings.Replace(file, "1/h", "2/h", 1))
	changed.Keep(old)
	if l := changed.Take(a, refund, now); l != nil {
		t.Fatalf("a limit whose rate changed kept the old bucket: refused by %s", l.Limit)
	}
}

// Many principals cannot grow the buckets without bound: past MaxBuckets
// they share one overflow bucket, which limits them together.
func TestLimitsBounded(t *testing.T) {
	s, err := compile(t, `limits: [{name: per-agent, per: principal, rate: 1/h, burst: 1}]`)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	op := catalog()[0].Metadata
	refused := 0
	for i := range policyfile.MaxBuckets + 100 {
		if s.Take(idem.Principal{Org: "acme", ID: "p" + string(rune(i))}, op, now) != nil {
			refused++
		}
	}
	if refused != 99 { // the overflow bucket lets one of the last 100 through
		t.Errorf("refused %d of the principals past the bound; want 99", refused)
	}
}

// A rule matched by a glob or a side effect does not apply to an
// operation whose input lacks a field it reads; one that names the
// operation must compile for it.
func TestGlobSkipsOperationsWithoutTheField(t *testing.T) {
	s, err := compile(t, `policies: [{name: paths, sideEffects: [write, destructive], when: 'args.path.startsWith("/etc")', outcome: deny}]`)
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], `"paths" does not apply to payments.refund`) {
		t.Errorf("warnings %q", w)
	}
	s2, err := compile(t, `policies: [{name: ask, operations: ["payments.refund", "fs.write_file"], outcome: require_approval}]`)
	if err != nil {
		t.Fatal(err)
	}
	if w := s2.Warnings(); len(w) != 1 || !strings.Contains(w[0], `"ask" asks approval for fs.write_file, which take none`) {
		t.Errorf("warnings %q", w)
	}
	d, _, err := idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()},
		idem.PolicyInput{Operation: catalog()[0].Metadata, RawInput: json.RawMessage(`{"amount":1}`)})
	if err != nil || d.Effect != idem.Allow {
		t.Errorf("refund: %+v, %v; want allow", d, err)
	}
	d, _, err = idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()},
		idem.PolicyInput{Operation: catalog()[1].Metadata, RawInput: json.RawMessage(`{"path":"/etc/passwd"}`)})
	if err != nil || d.Effect != idem.Deny {
		t.Errorf("write: %+v, %v; want deny", d, err)
	}
	if _, err := compile(t, `policies: [{name: named, operations: ["fs.*", "payments.refund"], when: 'args.path == ""', outcome: deny}]`); err == nil || !strings.Contains(err.Error(), "payments.refund") {
		t.Errorf("a rule naming an operation without the field compiled: %v", err)
	}
}

// A recursive schema (a tree of $refs) compiles with its depth bounded:
// deep enough levels are dyn, so compiling cannot run away.
func TestRecursiveSchema(t *testing.T) {
	tree := idem.Descriptor{Metadata: idem.Metadata{Name: "tree.plant", SideEffect: idem.SideEffectWrite},
		InputSchema: json.RawMessage(`{"$ref":"#/$defs/Node","$defs":{"Node":{"type":"object","properties":{"name":{"type":"string"},"left":{"$ref":"#/$defs/Node"},"right":{"$ref":"#/$defs/Node"}}}}}`)}
	f, err := policyfile.Parse([]byte(`policies: [{name: deep, operations: ["tree.plant"], when: 'has(args.left) && args.left.right.name == "x"', outcome: deny}]`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := policyfile.Compile(f, []idem.Descriptor{tree}, policyfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()},
		idem.PolicyInput{Operation: tree.Metadata, RawInput: json.RawMessage(`{"name":"a","left":{"right":{"name":"x"}}}`)})
	if err != nil || d.Effect != idem.Deny {
		t.Fatalf("%+v, %v; want deny", d, err)
	}
	if _, err := policyfile.Compile(mustParse(t, `policies: [{name: typo, operations: ["tree.plant"], when: 'args.left.rigth.name == "x"', outcome: deny}]`), []idem.Descriptor{tree}, policyfile.Options{}); err == nil {
		t.Error("an unknown field deep in a recursive schema compiled")
	}
}

func mustParse(t *testing.T, yaml string) policyfile.File {
	t.Helper()
	f, err := policyfile.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A set serves concurrent calls: its programs and buckets are shared (run
// with -race). The limit admits exactly its burst of a thousand calls at
// one instant.
func TestConcurrentCalls(t *testing.T) {
	s, err := compile(t, rules+`
limits:
  - {name: burst, per: operation, operations: ["payments.refund"], rate: 1/h, burst: 50}
`)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := idem.Principal{Org: "acme", ID: "p" + strconv.Itoa(i)}
			d, _, err := idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()},
				idem.PolicyInput{Operation: catalog()[0].Metadata, Principal: p, RawInput: json.RawMessage(`{"amount":5000}`)})
			if err != nil || d.Rule != "big-refunds" {
				t.Errorf("%+v %v", d, err)
			}
			if s.Take(p, catalog()[0].Metadata, now) == nil {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Errorf("%d admitted; want the burst, 50", admitted.Load())
	}
}
