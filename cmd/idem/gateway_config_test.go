package main

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/gatewayconfig"
)

// TestRedactingHandler: a credential of the config never reaches the log,
// in the message, a string, an error, a group or an attribute added
// with With.
func TestRedactingHandler(t *testing.T) {
	cfg, err := gatewayconfig.Parse([]byte("upstreams:\n  - {name: a, url: 'http://h/mcp', headers: {Authorization: 'Bearer ${TOKEN}'}}\n"), t.TempDir(),
		func(string) string { return "hunter2-secret" })
	if err != nil {
		t.Fatal(err)
	}
	r := &redactor{}
	r.add(cfg)
	var buf bytes.Buffer
	log := slog.New(redacting{next: slog.NewJSONHandler(&buf, nil), r: r}).With("with", "x hunter2-secret")
	log.Info("dial Bearer hunter2-secret", "s", "hunter2-secret", "err", errors.New("401 for hunter2-secret"),
		slog.Group("g", "inner", "hunter2-secret"), "n", 3)
	out := buf.String()
	if strings.Contains(out, "hunter2") || strings.Count(out, "[redacted]") != 5 || !strings.Contains(out, `"n":3`) {
		t.Fatalf("logged %s", out)
	}
}

// TestGatewayConfigUsage: the refusals of idem gateway's --config and
// one-upstream flags, before anything is opened.
func TestGatewayConfigUsage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.yaml", "upstreams:\n  - {name: a, command: x}\n")
	policies := write("policies.yaml", "upstreams:\n  - {name: a, command: x}\npolicies:\n  - {name: p, operations: ['*'], outcome: deny}\n")
	policyFile := write("file-policies.yaml", "policies: []\n")
	emptyPolicies := write("empty.yaml", "upstreams:\n  - {name: a, command: /nonexistent/x}\npolicies: []\nlimits: []\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"config and a one-upstream flag", nil, []string{"gateway", "--config", ok, "--upstream", "http://h/mcp"}, "--upstream is for one upstream without --config"},
		{"a broken config", nil, []string{"gateway", "--config", write("bad.yaml", "upstreams:\n  - {name: a, comand: x}\n")}, `upstreams[0] "a": unknown key "comand"`},
		{"two sources of rules", nil, []string{"gateway", "--config", policies, "--policies", policyFile},
			"--policies " + policyFile + " and the policies:/limits: of --config " + policies + " are two sources of rules"},
		{"a misspelt rule key", nil, []string{"gateway", "--config", write("typo.yaml", "upstreams:\n  - {name: a, command: x}\npolicies:\n  - {name: p, outcom: deny}\n")},
			"field outcom not found"},
		{"a limit that is not a list", nil, []string{"gateway", "--config", write("limits.yaml", "upstreams:\n  - {name: a, command: x}\nlimits: {name: l}\n")},
			"limits: "},
		{"--upstream twice", nil, []string{"gateway", "--upstream", "http://a/mcp", "--upstream", "http://b/mcp"}, "--upstream is given 2 times"},
		{"--upstream-env of idem's own", nil, []string{"gateway", "--upstream-command", "x", "--upstream-env", "IDEM_STORE"}, "IDEM_STORE is one of idem's own variables"},
		{"--upstream-env of nothing", nil, []string{"gateway", "--upstream-command", "x", "--upstream-env", "NOPE"}, "idem's environment has no NOPE"},
		{"--upstream-env for HTTP", nil, []string{"gateway", "--upstream", "http://a/mcp", "--upstream-env", "A=b"}, "--upstream-env is for a spawned upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.env, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %q", code, stderr, tc.want)
			}
		})
	}
	// Empty policies and limits are accepted, with --policies too: the
	// start goes on (to the store, refused here).
	code, _, stderr := run(t, nil, "gateway", "--config", emptyPolicies, "--policies", policyFile, "--store", "nosuch:x")
	if code == 0 || strings.Contains(stderr, "two sources") || !strings.Contains(stderr, "nosuch") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := run(t, nil, "gateway", "--config", policies, "--policies", policyFile); code != exitUsage {
		t.Errorf("two sources of rules: exit %d, want %d (usage)", code, exitUsage)
	}
}

// gatewayOpenAPIDoc is an OpenAPI upstream of one operation whose input
// has an integer amount: its document is all a start reads of it.
const gatewayOpenAPIDoc = `{"openapi": "3.1.0", "info": {"title": "pay", "version": "1"},
 "paths": {"/refunds": {"post": {"operationId": "refund",
  "requestBody": {"required": true, "content": {"application/json": {"schema":
   {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}}}},
  "responses": {"200": {"description": "ok"}}}}}}`

// TestGatewayConfigRefusesRulesThatDoNotCompile: the config's policies
// compile against the served names at start; one that does not is
// refused with the rule's name and CEL's message, nothing served.
func TestGatewayConfigRefusesRulesThatDoNotCompile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pay.json"), []byte(gatewayOpenAPIDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, rules, want string }{
		{"a type error", "policies:\n  - {name: big-refunds, operations: [pay.refund], when: 'args.amount > \"x\"', outcome: deny}\n",
			"no matching overload"},
		{"an unknown field", "policies:\n  - {name: big-refunds, operations: [pay.refund], when: 'args.ammount > 1', outcome: deny}\n",
			"undefined field 'ammount'"},
		{"the unprefixed name", "policies:\n  - {name: big-refunds, operations: [refund], outcome: deny}\n",
			`no operation named "refund"`},
		{"a limit on an unknown tool", "limits:\n  - {name: big-refunds, per: principal, operations: [pay.nope], rate: 1/m}\n",
			`no operation named "pay.nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "gateway.yaml")
			if err := os.WriteFile(cfg, []byte("upstreams:\n  - {name: pay, openapi: pay.json, baseURL: 'http://127.0.0.1:1'}\n"+tc.rules), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := run(t, nil, "gateway", "--config", cfg, "--addr", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(dir, "idem.db"),
				"--secret-key-file", filepath.Join(dir, "idem.key"))
			if code != exitError || !strings.Contains(stderr, `"big-refunds"`) || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "listening") {
				t.Errorf("exit %d, stderr %q; want 1 naming the rule and %q, nothing served", code, stderr, tc.want)
			}
		})
	}
}

// TestUpstreamNames: operation.upstream is the configured name of the
// upstream that serves the operation, taken from the declaration (an
// unprefixed name too), and the URL of the one-upstream flags' upstream
// (idem proxy's too, one code path).
func TestUpstreamNames(t *testing.T) {
	cfg := &gatewayconfig.Config{Upstreams: []gatewayconfig.Upstream{{Name: "memory", Prefix: true}, {Name: "everything"}}}
	decl := &gateway.Declaration{Upstreams: map[string]string{"memory.read_graph": "memory", "echo": "everything"}}
	got := upstreamNames(cfg, decl)
	if got["memory.read_graph"] != "memory" || got["echo"] != "everything" || len(got) != 2 {
		t.Errorf("config: %v", got)
	}
	one := &gatewayconfig.Config{Upstreams: []gatewayconfig.Upstream{{Name: "upstream", Anonymous: true, URL: "http://127.0.0.1:3001/mcp"}}}
	if got := upstreamNames(one, &gateway.Declaration{Upstreams: map[string]string{"echo": "upstream"}}); got["echo"] != "http://127.0.0.1:3001/mcp" {
		t.Errorf("--upstream URL: %v", got)
	}
	proxied := &gatewayconfig.Config{Upstreams: []gatewayconfig.Upstream{{Name: "upstream", Anonymous: true, Kind: gatewayconfig.KindOpenAPI, BaseURL: "http://127.0.0.1:9000"}}}
	if got := upstreamNames(proxied, &gateway.Declaration{Upstreams: map[string]string{"createThing": "upstream"}}); got["createThing"] != "http://127.0.0.1:9000" {
		t.Errorf("idem proxy --upstream: %v", got)
	}
	spawned := &gatewayconfig.Config{Upstreams: []gatewayconfig.Upstream{{Name: "upstream", Anonymous: true, Command: []string{"mcp-server"}}}}
	if got := upstreamNames(spawned, &gateway.Declaration{Upstreams: map[string]string{"echo": "upstream"}}); got["echo"] != "" || len(got) != 1 {
		t.Errorf("--upstream-command: %v", got)
	}
}
