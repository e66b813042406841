package main

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	emptyPolicies := write("empty.yaml", "upstreams:\n  - {name: a, command: /nonexistent/x}\npolicies: []\nlimits: []\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"config and a one-upstream flag", nil, []string{"gateway", "--config", ok, "--upstream", "http://h/mcp"}, "--upstream is for one upstream without --config"},
		{"a broken config", nil, []string{"gateway", "--config", write("bad.yaml", "upstreams:\n  - {name: a, comand: x}\n")}, `upstreams[0] "a": unknown key "comand"`},
		{"policies before issue 35", nil, []string{"gateway", "--config", policies}, "policies in the gateway config arrive with issue 35"},
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
	// Empty policies and limits are accepted: the start goes on (to the
	// store, refused here).
	code, _, stderr := run(t, nil, "gateway", "--config", emptyPolicies, "--store", "nosuch:x")
	if code == 0 || strings.Contains(stderr, "issue 35") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
