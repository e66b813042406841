package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// directTools lists the tools an MCP server serves to a client of its
// own, without the gateway.
func directTools(t *testing.T, transport mcp.Transport) []string {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-direct", Version: "1"}, nil).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

// TestGatewayConfigEveryUpstream fronts, in one idem gateway --config,
// every kind of upstream issue 34's checks name: server-memory and
// server-everything spawned over stdio, server-everything over
// streamable HTTP, server-filesystem on a temporary directory, and the
// Python OpenAPI API. Every tool each MCP server lists to a client of its
// own is served under its upstream's name (edit_file included), the
// Inspector CLI lists the same, and edit_file runs through the gateway:
// its dryRun the tool's own argument (a preview, nothing written), then
// the edit once under a key, replayed.
func TestGatewayConfigEveryUpstream(t *testing.T) {
	dir := gatewayDir(t)
	api := startUpstream(t)
	everythingURL := startEverythingHTTP(t)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "files.yaml"), "edit_file:\n  kind: same_key_replay\n  reconcile: read_text_file\n  rationale: An edit is made once per key.\n")
	memoryFile := filepath.Join(dir, "memory.jsonl")
	writeFile(t, filepath.Join(dir, "gateway.yaml"), fmt.Sprintf(`upstreams:
  - name: memory
    command: node
    args: [%q]
    env: {MEMORY_FILE_PATH: %q}
    contracts: contracts.yaml
  - name: everything
    command: node
    args: [%q, stdio]
  - name: everything-http
    url: %s
  - name: files
    command: node
    args: [%q, %q]
    contracts: files.yaml
  - name: widgets
    openapi: /openapi.json
    baseURL: %s
`, memoryServer(t), memoryFile, everythingServer(t), everythingURL, filesystemServer(t), root, api.url))
	g := startGatewayConfig(t, dir, "gateway.yaml", nil)
	cs := mcpHTTP(t, g, gatewayToken)
	served, _ := toolNames(t, cs)
	t.Logf("the gateway serves %d tools", len(served))

	memoryCmd := exec.Command("node", memoryServer(t))
	memoryCmd.Env = append(os.Environ(), "MEMORY_FILE_PATH="+filepath.Join(t.TempDir(), "direct.jsonl"))
	direct := map[string][]string{
		"memory":          directTools(t, &mcp.CommandTransport{Command: memoryCmd}),
		"everything":      directTools(t, &mcp.CommandTransport{Command: exec.Command("node", everythingServer(t), "stdio")}),
		"everything-http": directTools(t, &mcp.StreamableClientTransport{Endpoint: everythingURL}),
		"files":           directTools(t, &mcp.CommandTransport{Command: exec.Command("node", filesystemServer(t), root)}),
	}
	for upstream, tools := range direct {
		t.Logf("%s lists %d tools", upstream, len(tools))
		if len(tools) == 0 {
			t.Fatalf("%s lists no tools", upstream)
		}
		for _, tool := range tools {
			if !slices.Contains(served, upstream+"."+tool) {
				t.Errorf("%s's tool %s is not served as %s.%s", upstream, tool, upstream, tool)
			}
		}
	}
	if !slices.Contains(served, "files.edit_file") || !slices.Contains(served, "widgets.createWidget") {
		t.Fatalf("served: %v", served)
	}
	listed, _ := inspector(t, t.TempDir(), g.url+"/mcp", gatewayToken, "--method", "tools/list")
	if got := names(listed, "result.tools"); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(served))) {
		t.Errorf("the Inspector lists %v,\nthe SDK %v", got, served)
	}

	file := filepath.Join(root, "notes.txt")
	if res := mcpCall(t, cs, &mcp.CallToolParams{Name: "files.write_file", Arguments: map[string]any{"path": file, "content": "alpha\n"}}); res.IsError {
		t.Fatalf("files.write_file: %s", resultJSON(res))
	}
	edits := []any{map[string]any{"oldText": "alpha", "newText": "beta"}}
	preview := mcpCall(t, cs, &mcp.CallToolParams{Name: "files.edit_file", Arguments: map[string]any{"path": file, "edits": edits, "dryRun": true, "idempotencyKey": "edit-preview"}})
	if raw, _ := os.ReadFile(file); preview.IsError || !strings.Contains(payload(preview), "+beta") || string(raw) != "alpha\n" {
		t.Fatalf("edit_file with dryRun: %s; the file holds %q", resultJSON(preview), raw)
	}
	first := mcpCall(t, cs, &mcp.CallToolParams{Name: "files.edit_file", Arguments: map[string]any{"path": file, "edits": edits, "idempotencyKey": "edit-1"}})
	if raw, _ := os.ReadFile(file); first.IsError || string(raw) != "beta\n" {
		t.Fatalf("edit_file: %s; the file holds %q", resultJSON(first), raw)
	}
	again := mcpCall(t, cs, &mcp.CallToolParams{Name: "files.edit_file", Arguments: map[string]any{"path": file, "edits": edits, "idempotencyKey": "edit-1"}})
	if again.IsError || again.Meta["io.idem/replayed"] != true || payload(again) != payload(first) {
		t.Fatalf("edit_file again under its key (the upstream would refuse: alpha is gone): %s", resultJSON(again))
	}

	echo := mcpCall(t, cs, &mcp.CallToolParams{Name: "everything-http.echo", Arguments: map[string]any{"message": "over HTTP"}})
	if !strings.Contains(payload(echo), "over HTTP") {
		t.Fatalf("everything-http.echo: %s", resultJSON(echo))
	}
	g.do(t, "POST", "/widgets/widgets", gatewayToken, `{"name":"every"}`, "Idempotency-Key", "every-1").want(t, 201, "")
}
