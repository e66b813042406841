package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// idem gateway --config (SPEC §17.1): several upstreams behind one
// endpoint, each named, filtered and given its own environment.

// startGatewayConfig runs idem gateway --config config, with env added
// to the gateway's own environment.
func startGatewayConfig(t *testing.T, dir, config string, env []string, args ...string) *server {
	t.Helper()
	all := append([]string{"gateway", "--config", config, "--tokens-file", filepath.Join(dir, "tokens"),
		"--addr", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(dir, "idem.db"), "--secret-key-file", filepath.Join(dir, "idem.key"),
		"--lease-grace", "1s"}, args...)
	cmd := exec.Command(binary, all...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR="), env...)
	return launch(t, cmd, "idem gateway --config")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// toolText is the text of a tool result's first content block, as the
// HTTP route answers it.
func toolText(t *testing.T, r reply) string {
	t.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(r.raw, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("not a tool result: %s", r.raw)
	}
	return res.Content[0].Text
}

// TestGatewayConfig fronts server-memory and server-everything (both
// spawned) and the Python OpenAPI upstream with one config: every name
// prefixed by its upstream, the include filter, one catalog, one OpenAPI
// document and one /mcp for all, keyed calls replayed with one upstream
// effect each, and the environment a spawned upstream sees: the
// allow-list and its config's env, never idem's IDEM_* variables.
func TestGatewayConfig(t *testing.T) {
	dir := gatewayDir(t)
	api := startUpstream(t)
	writeFile(t, filepath.Join(dir, "widgets.yaml"), "createOrder:\n  kind: same_key_replay\n  reconcile: listWidgets\n  rationale: An order replays by key.\n")
	writeFile(t, filepath.Join(dir, "gateway.yaml"), fmt.Sprintf(`upstreams:
  - name: memory
    command: node
    args: [%q]
    env: {MEMORY_FILE_PATH: %q}
    contracts: contracts.yaml
  - name: everything
    command: node
    args: [%q, stdio]
    env: {PASSED: "${PASS_ME}", LITERAL: plain}
    include: ["echo", "get-*"]
    exclude: ["get-tiny-image"]
    timeouts: {connect: 20s, call: 10s}
  - name: widgets
    openapi: /openapi.json
    baseURL: %s
    contracts: widgets.yaml
`, memoryServer(t), filepath.Join(dir, "memory.jsonl"), everythingServer(t), api.url))
	g := startGatewayConfig(t, dir, "gateway.yaml", []string{"PASS_ME=handed-over", "IDEM_TOKENS_FILE=" + filepath.Join(dir, "tokens"), "IDEM_LEAK_CHECK=never-seen"})

	cat := g.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
	var names []string
	for _, op := range cat.body["operations"].([]any) {
		names = append(names, op.(map[string]any)["name"].(string))
	}
	for _, want := range []string{"memory.create_entities", "memory.read_graph", "everything.echo", "everything.get-env", "widgets.createWidget", "widgets.listWidgets", "widgets.createOrder"} {
		if !slices.Contains(names, want) {
			t.Errorf("the catalog lacks %s: %v", want, names)
		}
	}
	for _, not := range []string{"everything.get-tiny-image", "everything.trigger-long-running-operation", "create_entities", "echo"} {
		if slices.Contains(names, not) {
			t.Errorf("the catalog serves %s: %v", not, names)
		}
	}

	t.Run("one MCP endpoint", func(t *testing.T) {
		cs := mcpHTTP(t, g, gatewayToken)
		listed, _ := toolNames(t, cs)
		for _, want := range []string{"memory.create_entities", "everything.echo", "widgets.createOrder"} {
			if !slices.Contains(listed, want) {
				t.Errorf("tools/list lacks %s: %v", want, listed)
			}
		}
		args := map[string]any{"entities": []any{map[string]any{"name": "gw-config", "entityType": "test", "observations": []any{"once"}}}, "idempotencyKey": "cfg-1"}
		first := mcpCall(t, cs, &mcp.CallToolParams{Name: "memory.create_entities", Arguments: args})
		again := mcpCall(t, cs, &mcp.CallToolParams{Name: "memory.create_entities", Arguments: args})
		if first.IsError || payload(first) != payload(again) {
			t.Fatalf("the replay differs:\n%s\n%s", resultJSON(first), resultJSON(again))
		}
		graph := g.do(t, "POST", "/tools/memory.read_graph", gatewayToken, `{}`).want(t, 200, "")
		if n := strings.Count(string(graph.raw), `\"name\": \"gw-config\"`); n != 1 {
			t.Fatalf("the graph holds %d gw-config entities: %s", n, graph.raw)
		}
		echo := mcpCall(t, cs, &mcp.CallToolParams{Name: "everything.echo", Arguments: map[string]any{"message": "through"}})
		if !strings.Contains(resultJSON(echo), "through") {
			t.Fatalf("echo: %s", resultJSON(echo))
		}
	})

	t.Run("prompts and resources of every upstream", func(t *testing.T) {
		cs := mcpHTTP(t, g, gatewayToken)
		ctx := t.Context()
		prompts := promptNames(t, cs)
		if !slices.Contains(prompts, "everything.simple-prompt") || slices.Contains(prompts, "simple-prompt") {
			t.Fatalf("prompts %v, want server-everything's named everything.<prompt>", prompts)
		}
		got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "everything.simple-prompt"})
		if err != nil || len(got.Messages) != 1 {
			t.Fatalf("prompts/get everything.simple-prompt: %v %+v", err, got)
		}
		readFirstResource(t, cs)
	})

	t.Run("the OpenAPI upstream under its prefix", func(t *testing.T) {
		body := `{"name":"cog"}`
		first := g.do(t, "POST", "/widgets/widgets", gatewayToken, body, "Idempotency-Key", "w-1").want(t, 201, "")
		again := g.do(t, "POST", "/widgets/widgets", gatewayToken, body, "Idempotency-Key", "w-1").want(t, 201, "")
		if again.header.Get("Idempotent-Replayed") != "true" || string(again.raw) != string(first.raw) {
			t.Fatalf("the replay: %v %s", again.header, again.raw)
		}
		if n := api.stats(t).effects("widget"); n != 1 {
			t.Fatalf("the upstream created %d widgets, want 1", n)
		}
		id, _ := first.body["id"].(string)
		g.do(t, "GET", "/widgets/widgets/"+id, gatewayToken, "").want(t, 200, "")
		if paths := api.stats(t).Paths; !slices.Contains(paths, "/widgets/"+id) {
			t.Fatalf("the upstream saw %v, not its own path /widgets/%s", paths, id)
		}
	})

	t.Run("one OpenAPI document", func(t *testing.T) {
		doc := g.do(t, "GET", "/openapi.json", "", "").want(t, 200, "")
		paths, _ := doc.body["paths"].(map[string]any)
		for _, p := range []string{"/tools/memory.create_entities", "/tools/everything.echo", "/widgets/widgets", "/widgets/orders"} {
			if paths[p] == nil {
				t.Errorf("the document lacks %s", p)
			}
		}
	})

	t.Run("a spawned upstream's environment", func(t *testing.T) {
		r := g.do(t, "POST", "/tools/everything.get-env", gatewayToken, `{}`).want(t, 200, "")
		var env map[string]string
		if err := json.Unmarshal([]byte(toolText(t, r)), &env); err != nil {
			t.Fatalf("get-env: %s", r.raw)
		}
		for name := range env {
			if strings.HasPrefix(name, "IDEM_") {
				t.Errorf("the upstream sees idem's %s", name)
			}
		}
		if env["PASSED"] != "handed-over" || env["LITERAL"] != "plain" || env["PATH"] == "" {
			t.Errorf("the upstream's environment lacks what the config passed: %v", env)
		}
		if _, ok := env["PASS_ME"]; ok {
			t.Errorf("the upstream sees the gateway's PASS_ME: %v", env)
		}
	})

	if strings.Contains(g.logs(), "handed-over") {
		t.Errorf("a resolved credential reached the log:\n%s", g.logs())
	}
}

// TestGatewayConfigRefusals: a name served by two unprefixed upstreams
// and a repeated --upstream stop the start, naming what to change.
func TestGatewayConfigRefusals(t *testing.T) {
	dir := gatewayDir(t)
	bin := filepath.Join(t.TempDir(), "gwupstream")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/gwupstream").CombinedOutput(); err != nil {
		t.Fatalf("build gwupstream: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(dir, "gateway.yaml"), fmt.Sprintf(`upstreams:
  - {name: one, command: %q, prefix: false}
  - {name: two, command: %q, prefix: false}
`, bin, bin))
	code, stderr := runIdem(t, dir, "gateway", "--config", "gateway.yaml", "--store", "sqlite:"+filepath.Join(dir, "idem.db"), "--secret-key-file", filepath.Join(dir, "idem.key"), "--addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(stderr, `the upstreams "one" and "two" both serve "grow"`) {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	code, stderr = runIdem(t, dir, "gateway", "--upstream-command", bin, "--upstream-command", bin)
	if code != 2 || !strings.Contains(stderr, "--upstream-command is given 2 times") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
}

// runIdem runs the binary to its end and returns its exit code and
// stderr.
func runIdem(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestGatewayUpstreamEnvironment: the one-upstream flags spawn the
// upstream with the allow-list and --upstream-env only, never idem's
// IDEM_* variables (issue 34: a spawned upstream inherited IDEM_STORE,
// IDEM_TOKENS_FILE, IDEM_SECRET_KEY_FILE).
func TestGatewayUpstreamEnvironment(t *testing.T) {
	dir := gatewayDir(t)
	leaked := []string{"IDEM_TOKENS_FILE=" + filepath.Join(dir, "tokens"), "IDEM_SECRET_KEY_FILE=" + filepath.Join(dir, "idem.key"), "OTHER_SECRET=x"}
	g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), leaked, "--upstream-command", "node "+everythingServer(t)+" stdio")
	r := g.do(t, "POST", "/tools/get-env", gatewayToken, `{}`).want(t, 200, "")
	var env map[string]string
	if err := json.Unmarshal([]byte(toolText(t, r)), &env); err != nil {
		t.Fatalf("get-env: %s", r.raw)
	}
	for name := range env {
		if strings.HasPrefix(name, "IDEM_") || name == "OTHER_SECRET" {
			t.Errorf("the upstream sees the gateway's %s", name)
		}
	}
	if env["PATH"] == "" {
		t.Errorf("the upstream has no PATH: %v", env)
	}
}

// everythingOn runs server-everything in streamable HTTP mode on port
// and returns a func that kills it.
func everythingOn(t *testing.T, port string) (kill func()) {
	t.Helper()
	cmd := exec.Command("node", everythingServer(t), "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				close(ready)
			}
		}
	}()
	var once sync.Once
	kill = func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	t.Cleanup(kill)
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("server-everything did not listen within 30 s")
	}
	return kill
}

// upstreamStates reads GET /readyz's upstreams, by name.
func upstreamStates(t *testing.T, g *server) map[string]string {
	t.Helper()
	r := g.do(t, "GET", "/readyz", "", "").want(t, 200, "")
	out := map[string]string{}
	ups, _ := r.get("data.upstreams").([]any)
	for _, u := range ups {
		m, _ := u.(map[string]any)
		out[fmt.Sprint(m["name"])] = fmt.Sprint(m["state"])
	}
	return out
}

// TestGatewayUpstreamDownAndBack: an HTTP upstream down at start does not
// stop the gateway, which serves the others and serves its tools once it
// answers; killed later, its tools answer 503 UPSTREAM_UNAVAILABLE
// (retryable, key free) and /readyz says so, and once it is back the
// same call runs, the gateway never restarted.
func TestGatewayUpstreamDownAndBack(t *testing.T) {
	dir := gatewayDir(t)
	port := freePort(t)
	writeFile(t, filepath.Join(dir, "gateway.yaml"), fmt.Sprintf(`upstreams:
  - name: memory
    command: node
    args: [%q]
    env: {MEMORY_FILE_PATH: %q}
  - name: everything
    url: http://127.0.0.1:%s/mcp
    timeouts: {connect: 5s}
`, memoryServer(t), filepath.Join(dir, "memory.jsonl"), port))
	g := startGatewayConfig(t, dir, "gateway.yaml", nil, "--reconnect-max-wait", "1s")
	if st := upstreamStates(t, g); st["memory"] != "up" || st["everything"] != "down" {
		t.Fatalf("/readyz at start: %v", st)
	}
	if !strings.Contains(g.logs(), "cannot be reached at start") || strings.Contains(g.logs(), "the key is free") {
		t.Fatalf("the start-up log says it in call words:\n%s", g.logs())
	}
	g.do(t, "POST", "/tools/memory.read_graph", gatewayToken, `{}`).want(t, 200, "")
	g.do(t, "POST", "/tools/everything.echo", gatewayToken, `{"message":"early"}`).want(t, 404, "NOT_FOUND")

	kill := everythingOn(t, port)
	waitFor(t, 30*time.Second, "everything up in /readyz", func() bool { return upstreamStates(t, g)["everything"] == "up" })
	waitFor(t, 30*time.Second, "everything's tools served", func() bool {
		r := g.do(t, "POST", "/tools/everything.echo", gatewayToken, `{"message":"first"}`)
		return r.status == 200
	})

	kill()
	r := g.do(t, "POST", "/tools/everything.echo", gatewayToken, `{"message":"down"}`, "Idempotency-Key", "down-1").want(t, 503, "UPSTREAM_UNAVAILABLE")
	if r.get("retryable") != true {
		t.Fatalf("503 not retryable: %s", r.raw)
	}
	if st := upstreamStates(t, g); st["everything"] != "down" || st["memory"] != "up" {
		t.Fatalf("/readyz with everything killed: %v", st)
	}
	g.do(t, "POST", "/tools/memory.read_graph", gatewayToken, `{}`).want(t, 200, "")

	everythingOn(t, port)
	waitFor(t, 30*time.Second, "everything back", func() bool { return upstreamStates(t, g)["everything"] == "up" })
	back := g.do(t, "POST", "/tools/everything.echo", gatewayToken, `{"message":"back"}`).want(t, 200, "")
	if !strings.Contains(string(back.raw), "back") {
		t.Fatalf("echo once back: %s", back.raw)
	}
	if g.cmd.ProcessState != nil {
		t.Fatal("the gateway exited")
	}
}

// TestGatewayConfigReload changes the config file under a running
// gateway: an upstream added is served, with tools/list_changed; a broken
// file is refused and the running config kept, the reason logged; SIGHUP
// with nothing changed notifies nobody; an upstream removed while it
// holds a call lets that call finish, and its tools are gone.
func TestGatewayConfigReload(t *testing.T) {
	dir := gatewayDir(t)
	memory := fmt.Sprintf(`  - name: memory
    command: node
    args: [%q]
    env: {MEMORY_FILE_PATH: %q}
`, memoryServer(t), filepath.Join(dir, "memory.jsonl"))
	everything := fmt.Sprintf(`  - name: everything
    command: node
    args: [%q, stdio]
    contracts: contracts.yaml
`, everythingServer(t))
	file := filepath.Join(dir, "gateway.yaml")
	writeFile(t, file, "upstreams:\n"+memory)
	g := startGatewayConfig(t, dir, "gateway.yaml", nil, "--config-check-interval", "100ms")
	changed := make(chan struct{}, 10)
	transport := &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{gatewayToken}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	notified := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no tools/list_changed:\n%s", what, g.logs())
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case <-changed:
			t.Fatalf("%s: tools/list_changed while the tools did not change", what)
		case <-time.After(time.Second):
		}
	}
	served := func() []string {
		names, _ := toolNames(t, cs)
		return names
	}

	writeFile(t, file, "upstreams:\n"+memory+everything)
	notified("an upstream added")
	for len(changed) > 0 { // the upstream's own list_changed at its start may follow
		<-changed
	}
	if names := served(); !slices.Contains(names, "everything.echo") || !slices.Contains(names, "memory.read_graph") {
		t.Fatalf("tools after the upstream was added: %v", names)
	}
	g.do(t, "POST", "/tools/everything.echo", gatewayToken, `{"message":"added"}`).want(t, 200, "")

	writeFile(t, file, "upstreams:\n"+memory+everything+"    bogus: 1\n")
	waitFor(t, 30*time.Second, "the broken file refused in the log", func() bool {
		return strings.Contains(g.logs(), `the config file is refused and the running config stays`) && strings.Contains(g.logs(), `unknown key \"bogus\"`)
	})
	g.do(t, "POST", "/tools/everything.echo", gatewayToken, `{"message":"kept"}`).want(t, 200, "")

	writeFile(t, file, "upstreams:\n"+memory+everything)
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	quiet("the same config again, and SIGHUP")

	// A call held by everything when it is removed.
	body := `{"duration":3,"steps":3}`
	answered := make(chan reply, 1)
	go func() {
		r, _ := g.try("POST", "/tools/everything.trigger-long-running-operation", gatewayToken, body, "Idempotency-Key", "held-1")
		answered <- r
	}()
	waitFor(t, 15*time.Second, "the long call in flight", func() bool {
		r := g.do(t, "GET", "/v1/attempts/held-1", gatewayToken, "")
		return r.status == 200 && r.get("data.state") == "in_flight"
	})
	writeFile(t, file, "upstreams:\n"+memory)
	notified("an upstream removed")
	if names := served(); slices.Contains(names, "everything.echo") || !slices.Contains(names, "memory.read_graph") {
		t.Fatalf("tools after the upstream was removed: %v", names)
	}
	select {
	case r := <-answered:
		if r.status != 200 {
			t.Fatalf("the call held by the removed upstream: %d %s", r.status, r.raw)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call held by the removed upstream never finished")
	}
	g.do(t, "POST", "/tools/everything.echo", gatewayToken, `{"message":"gone"}`).want(t, 404, "NOT_FOUND")
	g.do(t, "POST", "/tools/memory.read_graph", gatewayToken, `{}`).want(t, 200, "")
}

// TestProxyUpstreamDownAtStart: idem proxy, a one-upstream config, starts
// while its upstream (and the document it serves) is down, and serves the
// operations once it answers (main stopped at start).
func TestProxyUpstreamDownAtStart(t *testing.T) {
	dir := proxyDir(t)
	port := freePort(t)
	p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), "http://127.0.0.1:"+port, "--max-stored-response", "65536")
	if st := upstreamStates(t, p); st["upstream"] != "down" {
		t.Fatalf("/readyz with the upstream down: %v", st)
	}
	p.do(t, "POST", "/widgets", proxyToken, `{"name":"early"}`).want(t, 404, "NOT_FOUND")

	script, err := filepath.Abs("testdata/upstream/upstream.py")
	if err != nil {
		t.Fatal(err)
	}
	api := exec.Command("python3", script, port)
	if err := api.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Process.Kill(); api.Wait() })
	waitFor(t, 30*time.Second, "the operations served once the upstream answers", func() bool {
		return p.do(t, "GET", "/widgets", proxyToken, "").status == 200
	})
	p.do(t, "POST", "/widgets", proxyToken, `{"name":"late"}`, "Idempotency-Key", "late-1").want(t, 201, "")
	if st := upstreamStates(t, p); st["upstream"] != "up" {
		t.Fatalf("/readyz with the upstream back: %v", st)
	}
}
