package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The MCP Inspector's CLI (npm's @modelcontextprotocol/inspector, its
// --cli mode), pinned and installed once into the user cache beside the
// servers, in a directory of its own (it brings its own SDK packages).
const inspectorPackage = "@modelcontextprotocol/inspector@2.12.0"

var inspectorInstall struct {
	once sync.Once
	dir  string
	err  error
}

// inspector runs the Inspector's CLI against the MCP endpoint url with
// the bearer token, args after it, and returns what it printed on stdout
// (--format json: one JSON object) and its exit code. Its home is a
// directory of the test's: the CLI keeps a catalog and secrets there.
func inspector(t *testing.T, home, url, token string, args ...string) (map[string]any, int) {
	t.Helper()
	needNode(t)
	inspectorInstall.once.Do(func() {
		inspectorInstall.dir, inspectorInstall.err = installNPM("mcp-inspector", []string{inspectorPackage})
	})
	if inspectorInstall.err != nil {
		t.Fatal(inspectorInstall.err)
	}
	launcher := filepath.Join(inspectorInstall.dir, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	all := append([]string{launcher, "--cli", url, "--header", "Authorization: Bearer " + token, "--format", "json"}, args...)
	cmd := exec.Command("node", all...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
		t.Fatalf("inspector %s: not one JSON object (exit %d):\n%s\nstderr:\n%s", strings.Join(args, " "), cmd.ProcessState.ExitCode(), stdout.String(), stderr.String())
	}
	return out, cmd.ProcessState.ExitCode()
}

// at reads a value at a dotted path of v (a number indexes an array).
func at(v any, path string) any {
	for _, part := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[part]
		case []any:
			var i int
			if _, err := fmt.Sscan(part, &i); err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// names lists the name of each object in the array at path.
func names(v any, path string) []string {
	var out []string
	items, _ := at(v, path).([]any)
	for _, it := range items {
		if n, ok := at(it, "name").(string); ok {
			out = append(out, n)
		}
	}
	return out
}

// TestGatewayInspectorCLI drives idem gateway --config (server-everything
// and server-memory, both spawned) with the MCP Inspector 2.12 CLI, as
// docs/gateway.md shows: the tools, prompts and resources of both
// upstreams, namespaced; a keyed call replayed on the second call, with
// the key as an argument and then in _meta, marked io.idem/replayed; the
// key with other arguments an error result; a prompt got and a resource
// read through the gateway.
func TestGatewayInspectorCLI(t *testing.T) {
	dir := gatewayDir(t)
	writeMemoryEverythingConfig(t, dir)
	g := startGatewayConfig(t, dir, "gateway.yaml", nil)
	home := t.TempDir()
	run := func(args ...string) (map[string]any, int) {
		t.Helper()
		out, code := inspector(t, home, g.url+"/mcp", gatewayToken, args...)
		t.Logf("inspector %s: exit %d", strings.Join(args, " "), code)
		return out, code
	}

	tools, _ := run("--method", "tools/list")
	listed := names(tools, "result.tools")
	for _, want := range []string{"memory.create_entities", "memory.read_graph", "everything.echo", "everything.get-env"} {
		if !slices.Contains(listed, want) {
			t.Errorf("tools/list lacks %s: %v", want, listed)
		}
	}
	for _, name := range listed {
		if !strings.HasPrefix(name, "memory.") && !strings.HasPrefix(name, "everything.") {
			t.Errorf("tools/list serves %s, not namespaced", name)
		}
	}

	echo, code := run("--method", "tools/call", "--tool-name", "everything.echo", "--tool-arg", "message=through the inspector")
	if code != 0 || at(echo, "result.content.0.text") != "Echo: through the inspector" {
		t.Fatalf("everything.echo: exit %d %v", code, echo)
	}

	entities := `entities=[{"name":"inspected","entityType":"test","observations":["once"]}]`
	first, code := run("--method", "tools/call", "--tool-name", "memory.create_entities", "--tool-arg", entities, "idempotencyKey=insp-1")
	// (at cannot name "io.idem/replayed", a key with a dot)
	meta := func(out map[string]any) map[string]any {
		m, _ := at(out, "result._meta").(map[string]any)
		return m
	}
	if code != 0 || meta(first)["io.idem/replayed"] != false || at(first, "result.structuredContent.entities.0.name") != "inspected" {
		t.Fatalf("the first keyed call: exit %d %v", code, first)
	}
	for _, key := range [][]string{{"--tool-arg", entities, "idempotencyKey=insp-1"}, {"--tool-arg", entities, "--tool-metadata", "idempotencyKey=insp-1"}} {
		again, code := run(append([]string{"--method", "tools/call", "--tool-name", "memory.create_entities"}, key...)...)
		if code != 0 || meta(again)["io.idem/replayed"] != true || meta(again)["io.idem/executionId"] != meta(first)["io.idem/executionId"] {
			t.Fatalf("the same key again (%s): exit %d %v", strings.Join(key, " "), code, again)
		}
		a, _ := json.Marshal(at(first, "result.content"))
		b, _ := json.Marshal(at(again, "result.content"))
		if string(a) != string(b) {
			t.Fatalf("the replay's content differs:\n%s\n%s", a, b)
		}
	}
	reused, code := run("--method", "tools/call", "--tool-name", "memory.create_entities",
		"--tool-arg", `entities=[{"name":"other","entityType":"test","observations":["once"]}]`, "idempotencyKey=insp-1")
	if code == 0 || at(reused, "result.isError") != true || !strings.HasPrefix(fmt.Sprint(at(reused, "result.content.0.text")), "IDEMPOTENCY_KEY_REUSED") {
		t.Fatalf("the key with other arguments: exit %d %v", code, reused)
	}
	graph := g.do(t, "POST", "/tools/memory.read_graph", gatewayToken, `{}`).want(t, 200, "")
	if n := strings.Count(string(graph.raw), `\"name\": \"inspected\"`); n != 1 {
		t.Fatalf("the graph holds %d inspected entities: %s", n, graph.raw)
	}

	prompts, _ := run("--method", "prompts/list")
	if p := names(prompts, "result.prompts"); !slices.Contains(p, "everything.args-prompt") || !slices.Contains(p, "everything.simple-prompt") {
		t.Fatalf("prompts/list: %v", p)
	}
	prompt, code := run("--method", "prompts/get", "--prompt-name", "everything.args-prompt", "--prompt-args", "city=Paris", "state=TX")
	if text := fmt.Sprint(at(prompt, "result.messages.0.content.text")); code != 0 || !strings.Contains(text, "Paris, TX") {
		t.Fatalf("prompts/get everything.args-prompt: exit %d %v", code, prompt)
	}

	resources, _ := run("--method", "resources/list")
	items, _ := at(resources, "result.resources").([]any)
	if len(items) == 0 {
		t.Fatalf("resources/list: %v", resources)
	}
	uri := fmt.Sprint(at(items[0], "uri"))
	read, code := run("--method", "resources/read", "--uri", uri)
	if code != 0 || at(read, "result.contents.0.uri") != uri || fmt.Sprint(at(read, "result.contents.0.text")) == "" {
		t.Fatalf("resources/read %s: exit %d %v", uri, code, read)
	}
}
