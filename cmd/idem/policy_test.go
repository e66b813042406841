package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idem-run/idem"
)

const demoPolicies = `
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
  - name: ops-refunds
    operations: ["order.refund"]
    when: '"ops" in principal.roles'
    outcome: allow
limits:
  - {name: agent-writes, per: principal, sideEffects: [write], rate: 30/m, burst: 10}
`

func writePolicies(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPolicyCheck(t *testing.T) {
	good := writePolicies(t, demoPolicies)
	code, out, stderr := runStdin(t, "", "policy", "check", good, "--catalog", demoCatalog)
	if code != 0 || !strings.Contains(out, "3 rules and 1 limits compile against 22 operations") {
		t.Fatalf("good file: exit %d, %q %q", code, out, stderr)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"type error", `policies: [{name: cmp, operations: [order.refund], when: 'args.amount > "x"', outcome: deny}]`, "no matching overload"},
		{"unknown field", `policies: [{name: typo, operations: [order.refund], when: 'args.amout > 1', outcome: deny}]`, "undefined field 'amout'"},
		{"unknown operation", `policies: [{name: ghost, operations: [order.refnd], outcome: deny}]`, `no operation named "order.refnd"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runStdin(t, "", "policy", "check", writePolicies(t, c.yaml), "--catalog", demoCatalog)
			if code != exitError || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, c.want)
			}
		})
	}
	if code, _, _ := runStdin(t, "", "policy", "check", good); code != exitUsage {
		t.Errorf("no catalog: exit %d; want 2", code)
	}
}

func TestPolicyEval(t *testing.T) {
	file := writePolicies(t, demoPolicies)
	for _, c := range []struct {
		name string
		args []string
		code int
		out  []string
	}{
		{"small refund", []string{"--args", `{"id":"o1","amount":10}`}, 0, []string{"(no rule matches)", "outcome: allow"}},
		{"big refund", []string{"--args", `{"id":"o1","amount":5000}`}, exitApproval,
			[]string{"big-refunds=require_approval", "outcome: require_approval by rule big-refunds: Refunds over 1000 need a person. (decided by role finance)"}},
		{"ops cannot skip the approval", []string{"--roles", "ops", "--args", `{"id":"o1","amount":5000}`}, exitApproval,
			[]string{"big-refunds=require_approval\nops-refunds=allow\n"}},
		{"denied", []string{"--args", `{"id":"o1","amount":13}`}, exitError, []string{"no-refund-13=deny", "outcome: deny by rule no-refund-13: Unlucky."}},
		{"a rule fails at run time", []string{"--args", `{"id":"o1"}`}, exitError, []string{"outcome: POLICY_FAILED: rule big-refunds could not be evaluated"}},
		{"bad principal", []string{"--principal", "nobody", "--args", `{}`}, exitUsage, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"policy", "eval", file, "--catalog", demoCatalog, "--operation", "order.refund"}, c.args...)
			code, out, stderr := runStdin(t, "", args...)
			if code != c.code {
				t.Fatalf("exit %d; want %d (%q %q)", code, c.code, out, stderr)
			}
			for _, w := range c.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout %q lacks %q", out, w)
				}
			}
		})
	}
}

// A policy file that does not compile against the served operations is
// refused at start with the rule's name and CEL's message: nothing is
// served.
func TestServeRefusesABrokenPolicyFile(t *testing.T) {
	dir := t.TempDir()
	bad := writePolicies(t, `policies: [{name: big-refunds, operations: [order.refund], when: 'args.amount > "x"', outcome: require_approval}]`)
	code, _, stderr := run(t, nil, "serve", "--demo", "--addr", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(dir, "idem.db"),
		"--secret-key-file", filepath.Join(dir, "idem.key"), "--policies", bad)
	if code != exitError || !strings.Contains(stderr, `"big-refunds"`) || !strings.Contains(stderr, "no matching overload") || strings.Contains(stderr, "listening") {
		t.Errorf("exit %d, stderr %q; want 1 naming the rule, nothing served", code, stderr)
	}
}

// idem approvals list and show print the rule that asked, its reason and
// the call's arguments.
func TestApprovalTablesShowTheRule(t *testing.T) {
	a := idem.Approval{ID: "apr_1", Operation: "payments.refund", Status: idem.ApprovalPending, RequestedBy: "agent-7",
		Reason: "Refunds over 1000 need a person.", Rule: "big-refunds", Input: json.RawMessage(`{"amount": 5000, "note": "` + strings.Repeat("é", 80) + `"}`)}
	var list, show bytes.Buffer
	approvalsTable(&list, []idem.Approval{a})
	approvalTable(&show, a)
	for _, want := range []string{"RULE", "big-refunds", "Refunds over 1000 need a person.", `{"amount":5000,"note":"éé`, "…"} {
		if !strings.Contains(list.String(), want) {
			t.Errorf("list lacks %q:\n%s", want, list.String())
		}
	}
	if !utf8.ValidString(list.String()) {
		t.Error("the list cut a character in two")
	}
	for _, want := range []string{"big-refunds", "Refunds over 1000 need a person.", `"amount": 5000`} {
		if !strings.Contains(show.String(), want) {
			t.Errorf("show lacks %q:\n%s", want, show.String())
		}
	}
}
