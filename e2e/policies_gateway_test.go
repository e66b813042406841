package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// filesystemPackage is the MCP filesystem server of TestGatewayPolicies,
// installed on its own (not with npmPackages, so that the other gateway
// tests keep their cached install).
const filesystemPackage = "@modelcontextprotocol/server-filesystem@2026.8.31"

var filesystemInstall struct {
	once sync.Once
	dir  string
	err  error
}

// filesystemServer returns server-filesystem's entry point, installing it
// once per machine into the user's cache.
func filesystemServer(t *testing.T) string {
	t.Helper()
	mcpServers(t) // skips without node and npm, as the other gateway tests
	filesystemInstall.once.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "idem-e2e", "server-filesystem-2026.8.31")
		filesystemInstall.dir = dir
		if _, err := os.Stat(filepath.Join(dir, "installed")); err == nil {
			return
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			filesystemInstall.err = err
			return
		}
		tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
		if err != nil {
			filesystemInstall.err = err
			return
		}
		cmd := exec.Command("npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", "--loglevel=error", filesystemPackage)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(tmp)
			filesystemInstall.err = err
			filesystemInstall.dir = string(out)
			return
		}
		os.WriteFile(filepath.Join(tmp, "installed"), nil, 0o644)
		if err := os.Rename(tmp, dir); err != nil {
			os.RemoveAll(tmp) // another run installed it first
		}
	})
	if filesystemInstall.err != nil {
		t.Fatalf("npm install %s: %v\n%s", filesystemPackage, filesystemInstall.err, filesystemInstall.dir)
	}
	return filepath.Join(filesystemInstall.dir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
}

// TestGatewayPolicies puts idem gateway --policies in front of
// server-filesystem (stdio) and drives it with the MCP SDK client: writes
// outside the workspace are denied by an args.path condition, naming the
// rule, and nothing is written; move_file needs an approval that names its
// rule, reason and arguments, and runs once approved; the rest is allowed.
func TestGatewayPolicies(t *testing.T) {
	server := filesystemServer(t)
	dir := writeServerDir(t, gatewayToken, gatewayApprover, `move_file:
  approval: policy
`)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(root, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(`policies:
  - name: writes-stay-in-workspace
    operations: ["write_file", "create_directory"]
    when: '!args.path.startsWith("`+work+`/")'
    outcome: deny
    reason: "Writes outside the workspace are not allowed for agents."
  - name: moves-need-a-person
    operations: ["move_file"]
    outcome: require_approval
    approverRole: approver
    reason: "Moving files needs a person."
`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil,
		"--upstream-command", "node "+server+" "+root, "--policies", policies)
	cs := mcpHTTP(t, g, gatewayToken)
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		return mcpCall(t, cs, &mcp.CallToolParams{Name: name, Arguments: args})
	}

	inside, outside := filepath.Join(work, "a.txt"), filepath.Join(root, "escape.txt")
	if res := call("write_file", map[string]any{"path": inside, "content": "hello"}); res.IsError {
		t.Fatalf("a write inside the workspace: %s", resultJSON(res))
	}
	denied := call("write_file", map[string]any{"path": outside, "content": "nope"})
	if !denied.IsError || field(idemProblem(denied), "code") != "POLICY_DENIED" ||
		field(idemProblem(denied), "details.rule") != "writes-stay-in-workspace" {
		t.Fatalf("a write outside the workspace: %s", resultJSON(denied))
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("the denied write reached the upstream: %v", err)
	}
	if res := call("read_text_file", map[string]any{"path": inside}); res.IsError || !strings.Contains(payload(res), "hello") {
		t.Fatalf("a read: %s", resultJSON(res))
	}

	moved := filepath.Join(work, "b.txt")
	move := map[string]any{"source": inside, "destination": moved}
	held := call("move_file", move)
	id, _ := field(idemProblem(held), "details.approvalId").(string)
	if !held.IsError || field(idemProblem(held), "code") != "APPROVAL_REQUIRED" || id == "" ||
		field(idemProblem(held), "details.rule") != "moves-need-a-person" {
		t.Fatalf("move_file without approval: %s", resultJSON(held))
	}
	a := g.do(t, "GET", "/v1/approvals/"+id, gatewayApprover, "").want(t, 200, "")
	if a.get("data.rule") != "moves-need-a-person" || a.get("data.reason") != "Moving files needs a person." || a.get("data.input.destination") != moved {
		t.Fatalf("approval %s", a.raw)
	}
	if _, err := os.Stat(inside); err != nil {
		t.Fatalf("the held move reached the upstream: %v", err)
	}
	g.do(t, "POST", "/v1/approvals/"+id+"/approve", gatewayApprover, `{}`).want(t, 200, "")
	if res := call("move_file", move); res.IsError {
		t.Fatalf("move_file once approved: %s", resultJSON(res))
	}
	if _, err := os.Stat(moved); err != nil {
		t.Fatalf("the approved move did not run: %v", err)
	}
}
