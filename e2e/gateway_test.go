package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/internal/pgtest"
)

// idem gateway's tests run it in front of MCP servers this project did
// not write, installed from npm at pinned versions into the user cache
// (once; later runs reuse them) and run with node directly, and drive it
// with the official TypeScript SDK, installed with them. Without node and
// npm they skip, unless IDEM_TEST_REQUIRE_NODE=1 (scripts/test.sh sets it
// in CI).
const (
	memoryPackage     = "@modelcontextprotocol/server-memory@2026.8.31"
	everythingPackage = "@modelcontextprotocol/server-everything@2026.8.31"
	tsSDKPackage      = "@modelcontextprotocol/sdk@1.32.2"
)

var npmPackages = []string{memoryPackage, everythingPackage, tsSDKPackage}

var npmInstall struct {
	once sync.Once
	dir  string
	err  error
}

// mcpServers returns the directory the pinned packages are installed in.
func mcpServers(t *testing.T) string {
	t.Helper()
	needNode(t)
	npmInstall.once.Do(func() { npmInstall.dir, npmInstall.err = installNPM("mcp-servers", npmPackages) })
	if npmInstall.err != nil {
		t.Fatal(npmInstall.err)
	}
	return npmInstall.dir
}

// needNode skips the test without node and npm, unless
// IDEM_TEST_REQUIRE_NODE=1 makes that a failure.
func needNode(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("IDEM_TEST_REQUIRE_NODE") == "1" {
				t.Fatalf("%s is not on PATH and IDEM_TEST_REQUIRE_NODE=1: idem gateway's tests need node and npm", tool)
			}
			t.Skipf("%s is not on PATH: idem gateway's tests run npm MCP servers with node (IDEM_TEST_REQUIRE_NODE=1 makes this a failure)", tool)
		}
	}
}

// installNPM installs packages into a directory of the user cache named
// by name and the packages, once: a later run finds them there.
func installNPM(name string, packages []string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(strings.Join(packages, " ")))
	dir := filepath.Join(cache, "idem-e2e", name+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "installed")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return dir, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		return dir, err
	}
	cmd := exec.Command("npm", append([]string{"install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", "--loglevel=error"}, packages...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return dir, fmt.Errorf("npm install %s: %v\n%s", strings.Join(packages, " "), err, out)
	}
	os.WriteFile(filepath.Join(tmp, "installed"), nil, 0o644)
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp) // another run installed it first
	}
	return dir, nil
}

func memoryServer(t *testing.T) string {
	return filepath.Join(mcpServers(t), "node_modules", "@modelcontextprotocol", "server-memory", "dist", "index.js")
}

func everythingServer(t *testing.T) string {
	return filepath.Join(mcpServers(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

const (
	gatewayToken    = "gateway-agent-token"
	gatewayApprover = "gateway-approver-token"
)

// gatewayDir writes the tokens file and the contracts overlay.
func gatewayDir(t *testing.T) string {
	return writeServerDir(t, gatewayToken, gatewayApprover, `create_entities:
  kind: same_key_replay
  reconcile: read_graph
  rationale: Entities are created once per key; a replay is the original answer.
add_observations:
  kind: same_key_replay
  reconcile: open_nodes
  rationale: Observations are added once per key.
create_relations:
  kind: same_key_replay
  reconcile: read_graph
  rationale: A relation needs a person's approval.
  approval: always
delete_entities:
  reconcile: read_graph
trigger-long-running-operation:
  kind: same_key_replay
  reconcile: echo
  rationale: A long operation replays by key.
  timeoutMs: 4000
`)
}

// startGateway runs idem gateway with upstream's flags and env added.
func startGateway(t *testing.T, dir, store string, env []string, upstream ...string) *server {
	t.Helper()
	args := append([]string{"gateway", "--contracts", filepath.Join(dir, "contracts.yaml"), "--tokens-file", filepath.Join(dir, "tokens"),
		"--addr", "127.0.0.1:0", "--store", store, "--secret-key-file", filepath.Join(dir, "idem.key"), "--lease-grace", "1s"}, upstream...)
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR="), env...)
	return launch(t, cmd, "idem gateway")
}

// memoryGateway is idem gateway spawning server-memory over stdio, its
// graph in memoryFile.
func memoryGateway(t *testing.T, dir, store, memoryFile string) *server {
	t.Helper()
	return startGateway(t, dir, store, nil, "--upstream-command", "node "+memoryServer(t), "--upstream-env", "MEMORY_FILE_PATH="+memoryFile)
}

// graph reads the knowledge graph through the upstream's own read tool.
func graph(t *testing.T, cs *mcp.ClientSession) (entities []map[string]any, relations []map[string]any) {
	t.Helper()
	sc, _ := toolCall(t, cs, "read_graph", map[string]any{})
	raw, _ := json.Marshal(sc)
	var g struct {
		Entities  []map[string]any `json:"entities"`
		Relations []map[string]any `json:"relations"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("read_graph: %s", raw)
	}
	return g.Entities, g.Relations
}

func resultJSON(res *mcp.CallToolResult) string {
	raw, _ := json.Marshal(res)
	return string(raw)
}

// payload is what a tool result says, without what the SDK adds by
// protocol version.
func payload(res *mcp.CallToolResult) string {
	raw, _ := json.Marshal(struct {
		Content           []mcp.Content `json:"content"`
		StructuredContent any           `json:"structuredContent"`
		IsError           bool          `json:"isError"`
	}{res.Content, res.StructuredContent, res.IsError})
	return string(raw)
}

func mcpCall(t *testing.T, cs *mcp.ClientSession, p *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), p)
	if err != nil {
		t.Fatalf("call %s: %v", p.Name, err)
	}
	return res
}

// TestGatewayMemory puts idem gateway in front of server-memory (stdio):
// contracts from the overlay and the annotations, a replay of the stored
// tool result with one upstream effect, 422, 400, approvals, and the
// stdio bridge idem mcp against the gateway.
func TestGatewayMemory(t *testing.T) {
	dir := gatewayDir(t)
	g := memoryGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), filepath.Join(dir, "memory.jsonl"))
	cs := mcpHTTP(t, g, gatewayToken)

	t.Run("catalog", func(t *testing.T) {
		cat := g.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
		kinds := map[string]string{}
		for _, op := range cat.body["operations"].([]any) {
			o := op.(map[string]any)
			kinds[o["name"].(string)] = o["retry"].(map[string]any)["kind"].(string)
			if o["path"] != "/tools/"+o["name"].(string) || o["method"] != "POST" {
				t.Errorf("%s is at %s %s", o["name"], o["method"], o["path"])
			}
		}
		want := map[string]string{"create_entities": "same_key_replay", "read_graph": "fresh_read", "open_nodes": "fresh_read",
			"delete_entities": "convergent", "delete_observations": "no_automatic_retry"}
		for name, kind := range want {
			if kinds[name] != kind {
				t.Errorf("%s: kind %q, want %q", name, kinds[name], kind)
			}
		}
		if !strings.Contains(g.logs(), "idempotentHint but name no reconcile") || !strings.Contains(g.logs(), "delete_observations") {
			t.Errorf("no start-up warning about delete_observations:\n%s", g.logs())
		}
		g.do(t, "GET", "/healthz", "", "").want(t, 200, "")
		g.do(t, "GET", "/readyz", "", "").want(t, 200, "")
		if m := g.do(t, "GET", "/metrics", "", ""); m.status != 200 || !strings.Contains(string(m.raw), "idem_") {
			t.Errorf("/metrics: %d", m.status)
		}
		if ui := g.do(t, "GET", "/ui/", "", ""); ui.status != 200 && ui.status != 303 {
			t.Errorf("/ui/: %d", ui.status)
		}
		doc := g.do(t, "GET", "/openapi.json", "", "").want(t, 200, "")
		if field(doc.body, "paths./tools/create_entities.post.x-idem-agent-retry.kind") != "same_key_replay" ||
			!strings.Contains(fmt.Sprint(field(doc.body, "paths./tools/create_entities.post.responses.200.content")), "application/vnd.idem.mcp-tool-result+json") {
			t.Errorf("the OpenAPI document's create_entities: %v", field(doc.body, "paths./tools/create_entities"))
		}
		list, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range list.Tools {
			if tool.Name == "read_graph" && (!tool.Annotations.ReadOnlyHint || !tool.Annotations.IdempotentHint) {
				t.Errorf("read_graph annotations %+v", tool.Annotations)
			}
			if tool.Name == "create_entities" && (tool.Annotations.ReadOnlyHint || tool.Annotations.IdempotentHint) {
				t.Errorf("create_entities annotations %+v", tool.Annotations)
			}
		}
	})

	anvil := map[string]any{"entities": []any{map[string]any{"name": "anvil", "entityType": "tool", "observations": []any{"heavy"}}}}
	t.Run("a replay is the stored result, with one upstream effect", func(t *testing.T) {
		args := map[string]any{"entities": anvil["entities"], "idempotencyKey": "ce-1"}
		first := mcpCall(t, cs, &mcp.CallToolParams{Name: "create_entities", Arguments: args})
		if first.IsError || !strings.Contains(resultJSON(first), "anvil") {
			t.Fatalf("first call: %s", resultJSON(first))
		}
		// The entity is removed behind the key's back: a second effect
		// would create it again (and answer an empty list).
		del := mcpCall(t, cs, &mcp.CallToolParams{Name: "delete_entities", Arguments: map[string]any{"entityNames": []any{"anvil"}}})
		if del.IsError {
			t.Fatalf("delete_entities: %s", resultJSON(del))
		}
		again := mcpCall(t, cs, &mcp.CallToolParams{Name: "create_entities", Arguments: args})
		// The served _meta marks the replay (issue 34 item 5); the rest is the stored result.
		if payload(again) != payload(first) || first.Meta["io.idem/replayed"] != false || again.Meta["io.idem/replayed"] != true {
			t.Fatalf("replay %s, first %s", resultJSON(again), resultJSON(first))
		}
		// The key in _meta, and over HTTP: the same record.
		viaMeta := mcpCall(t, cs, &mcp.CallToolParams{Name: "create_entities", Arguments: anvil, Meta: mcp.Meta{"idempotencyKey": "ce-1"}})
		if payload(viaMeta) != payload(first) || viaMeta.Meta["io.idem/replayed"] != true {
			t.Fatalf("replay by _meta: %s", resultJSON(viaMeta))
		}
		body, _ := json.Marshal(anvil)
		h := g.do(t, "POST", "/tools/create_entities", gatewayToken, string(body), "Idempotency-Key", "ce-1").want(t, 200, "")
		if h.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(h.raw), "anvil") {
			t.Fatalf("HTTP replay: %v %s", h.header, h.raw)
		}
		if entities, _ := graph(t, cs); len(entities) != 0 {
			t.Fatalf("the upstream ran create_entities again: %v", entities)
		}
	})

	t.Run("reuse, missing key, invalid input", func(t *testing.T) {
		res := mcpCall(t, cs, &mcp.CallToolParams{Name: "create_entities", Arguments: map[string]any{"entities": []any{}, "idempotencyKey": "ce-1"}})
		if !res.IsError || field(idemProblem(res), "code") != "IDEMPOTENCY_KEY_REUSED" {
			t.Fatalf("reuse over MCP: %s", resultJSON(res))
		}
		g.do(t, "POST", "/tools/create_entities", gatewayToken, `{"entities":[]}`, "Idempotency-Key", "ce-1").want(t, 422, "IDEMPOTENCY_KEY_REUSED")
		res = mcpCall(t, cs, &mcp.CallToolParams{Name: "create_entities", Arguments: anvil})
		if !res.IsError || field(idemProblem(res), "code") != "IDEMPOTENCY_KEY_REQUIRED" {
			t.Fatalf("no key over MCP: %s", resultJSON(res))
		}
		g.do(t, "POST", "/tools/create_entities", gatewayToken, `{"entities":[]}`).want(t, 400, "IDEMPOTENCY_KEY_REQUIRED")
		g.do(t, "POST", "/tools/create_entities", gatewayToken, `{"entities":"anvil"}`, "Idempotency-Key", "ce-bad").want(t, 400, "INVALID_INPUT")
		g.do(t, "POST", "/tools/read_graph", gatewayToken, `{}`, "Idempotency-Key", "ignored").want(t, 200, "")
		g.do(t, "POST", "/tools/delete_entities", gatewayToken, `{"entityNames":[]}`, "Idempotency-Key", "x").want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
	})

	t.Run("approval", func(t *testing.T) {
		mcpCall(t, cs, &mcp.CallToolParams{Name: "create_entities", Arguments: map[string]any{"idempotencyKey": "ce-2",
			"entities": []any{map[string]any{"name": "a", "entityType": "x", "observations": []any{}}, map[string]any{"name": "b", "entityType": "x", "observations": []any{}}}}})
		args := map[string]any{"relations": []any{map[string]any{"from": "a", "to": "b", "relationType": "knows"}}, "idempotencyKey": "rel-1"}
		held := mcpCall(t, cs, &mcp.CallToolParams{Name: "create_relations", Arguments: args})
		id, _ := field(idemProblem(held), "details.approvalId").(string)
		if !held.IsError || field(idemProblem(held), "code") != "APPROVAL_REQUIRED" || id == "" {
			t.Fatalf("create_relations without approval: %s", resultJSON(held))
		}
		if _, rel := graph(t, cs); len(rel) != 0 {
			t.Fatalf("a held call reached the upstream: %v", rel)
		}
		inbox := g.do(t, "GET", "/v1/approvals?status=pending", gatewayApprover, "").want(t, 200, "")
		if !strings.Contains(string(inbox.raw), id) {
			t.Fatalf("approval %s not in the inbox: %s", id, inbox.raw)
		}
		g.do(t, "POST", "/v1/approvals/"+id+"/approve", gatewayApprover, `{}`).want(t, 200, "")
		done := mcpCall(t, cs, &mcp.CallToolParams{Name: "create_relations", Arguments: args})
		if done.IsError {
			t.Fatalf("create_relations once approved: %s", resultJSON(done))
		}
		if _, rel := graph(t, cs); len(rel) != 1 {
			t.Fatalf("relations %v, want one", rel)
		}
		// Single use: the same intent under a new key needs a new approval.
		args["idempotencyKey"] = "rel-2"
		again := mcpCall(t, cs, &mcp.CallToolParams{Name: "create_relations", Arguments: args})
		if field(idemProblem(again), "code") != "APPROVAL_REQUIRED" || field(idemProblem(again), "details.approvalId") == id {
			t.Fatalf("a consumed approval authorized another call: %s", resultJSON(again))
		}
	})

	t.Run("idem mcp over stdio against the gateway", func(t *testing.T) {
		bridge := mcpStdio(t, g, gatewayToken)
		args := map[string]any{"observations": []any{map[string]any{"entityName": "a", "contents": []any{"bridged"}}}}
		first := mcpCall(t, bridge, &mcp.CallToolParams{Name: "add_observations", Arguments: args, Meta: mcp.Meta{"idempotencyKey": "obs-1"}})
		if first.IsError || !strings.Contains(resultJSON(first), "bridged") {
			t.Fatalf("add_observations through idem mcp: %s", resultJSON(first))
		}
		// The same key over /mcp replays what the bridge got.
		args["idempotencyKey"] = "obs-1"
		again := mcpCall(t, cs, &mcp.CallToolParams{Name: "add_observations", Arguments: args})
		// (The SDK adds _meta.serverInfo and resultType to results of the
		// newer protocol version the stdio session negotiates.)
		if payload(again) != payload(first) {
			t.Fatalf("replay over /mcp %s, first through idem mcp %s", resultJSON(again), resultJSON(first))
		}
	})
}

// freePort is a TCP port nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// startEverythingHTTP runs server-everything in streamable HTTP mode and
// returns its endpoint.
func startEverythingHTTP(t *testing.T) string {
	t.Helper()
	port := freePort(t)
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
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("server-everything did not listen within 30 s")
	}
	return "http://127.0.0.1:" + port + "/mcp"
}

// TestGatewayCrashIsIndeterminate kills idem gateway (SIGKILL) while a
// streamable HTTP upstream (server-everything) holds a keyed call: after a
// restart, the same key answers indeterminate once the lease has passed,
// and nothing is sent again.
func TestGatewayCrashIsIndeterminate(t *testing.T) {
	dir := gatewayDir(t)
	upstream := startEverythingHTTP(t)
	store := "sqlite:" + filepath.Join(dir, "idem.db")
	g := startGateway(t, dir, store, nil, "--upstream", upstream, "--upstream-header", "X-Test=gateway")
	body := `{"duration":20,"steps":20}`
	go g.try("POST", "/tools/trigger-long-running-operation", gatewayToken, body, "Idempotency-Key", "long-1")
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := g.do(t, "GET", "/v1/attempts/long-1", gatewayToken, "")
		if r.status == 200 && r.get("data.state") == "in_flight" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call was never in flight: %s", r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the upstream holds the call
	g.kill(t)

	g2 := startGateway(t, dir, store, nil, "--upstream", upstream)
	deadline = time.Now().Add(20 * time.Second)
	for {
		r := g2.do(t, "POST", "/tools/trigger-long-running-operation", gatewayToken, body, "Idempotency-Key", "long-1")
		if r.status == 409 && r.get("code") == "IDEMPOTENCY_RESULT_INDETERMINATE" {
			if r.get("details.reconcile") != "echo" {
				t.Fatalf("indeterminate without the reconcile tool: %s", r.raw)
			}
			break
		}
		if r.status != 409 || r.get("code") != "IDEMPOTENCY_KEY_IN_FLIGHT" || time.Now().After(deadline) {
			t.Fatalf("after the crash: %d %s", r.status, r.raw)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// A fresh read still goes through, over the new session.
	g2.do(t, "POST", "/tools/echo", gatewayToken, `{"message":"hi"}`).want(t, 200, "")
}

// TestGatewayTwoInstances runs two idem gateways on one PostgreSQL, each
// spawning server-memory on one graph file: 100 concurrent same-key calls
// split across them make one upstream effect, and every answer is it.
func TestGatewayTwoInstances(t *testing.T) {
	dir := gatewayDir(t)
	store := pgtest.NewDatabase(t)
	memory := filepath.Join(dir, "memory.jsonl")
	a := memoryGateway(t, dir, store, memory)
	b := memoryGateway(t, dir, store, memory)
	body := `{"entities":[{"name":"storm","entityType":"test","observations":["once"]}]}`
	type answer struct {
		status int
		exe    string
		body   string
		err    error
	}
	answers := make(chan answer, 100)
	var wg sync.WaitGroup
	for i := range 100 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.try("POST", "/tools/create_entities", gatewayToken, body, "Idempotency-Key", "storm-1", "Prefer", "wait=30")
			answers <- answer{r.status, r.header.Get("Idem-Execution-Id"), string(r.raw), err}
		}()
	}
	wg.Wait()
	close(answers)
	var first *answer
	for ans := range answers {
		if ans.err != nil || ans.status != 200 {
			t.Fatalf("answer %d %s (%v)", ans.status, ans.body, ans.err)
		}
		if first == nil {
			first = &ans
			if !strings.Contains(ans.body, "storm") {
				t.Fatalf("the answer does not hold the created entity: %s", ans.body)
			}
			continue
		}
		if ans.exe != first.exe || ans.body != first.body {
			t.Fatalf("two answers: %s %s and %s %s", first.exe, first.body, ans.exe, ans.body)
		}
	}
	r := a.do(t, "POST", "/tools/read_graph", gatewayToken, `{}`).want(t, 200, "")
	if n := strings.Count(string(r.raw), `\"name\": \"storm\"`); n != 1 {
		t.Fatalf("the graph holds %d storm entities: %s", n, r.raw)
	}
}

// TestGatewayListChanged: the upstream's notifications/tools/list_changed
// updates the tools served and reaches the gateway's MCP clients; a
// periodic re-list that finds nothing new sends nothing. The upstream is
// e2e/testdata/gwupstream (a go-sdk server whose tool grow adds a tool):
// the npm servers offer no way to change their tools on demand.
func TestGatewayListChanged(t *testing.T) {
	dir := gatewayDir(t)
	bin := filepath.Join(t.TempDir(), "gwupstream")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/gwupstream").CombinedOutput(); err != nil {
		t.Fatalf("build gwupstream: %v\n%s", err, out)
	}
	g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil, "--upstream-command", bin, "--reload-interval", "300ms")
	changed := make(chan struct{}, 10)
	transport := &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{gatewayToken}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	quiet := func(d time.Duration) {
		select {
		case <-changed:
			t.Fatal("tools/list_changed while the upstream's tools did not change")
		case <-time.After(d):
		}
	}
	quiet(time.Second) // three re-lists find nothing new
	if res := mcpCall(t, cs, &mcp.CallToolParams{Name: "grow", Arguments: map[string]any{}}); res.IsError {
		t.Fatalf("grow: %s", resultJSON(res))
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatalf("no tools/list_changed reached the client:\n%s", g.logs())
	}
	names, _ := toolNames(t, cs)
	if !strings.Contains(strings.Join(names, ","), "extra_1") {
		t.Fatalf("tools after grow: %v", names)
	}
	if res := mcpCall(t, cs, &mcp.CallToolParams{Name: "extra_1", Arguments: map[string]any{}}); res.IsError || !strings.Contains(resultJSON(res), "extra_1") {
		t.Fatalf("extra_1: %s", resultJSON(res))
	}
	g.do(t, "POST", "/tools/extra_1", gatewayToken, `{}`).want(t, 200, "")
	quiet(time.Second)
}

// TestGatewayStdioUpstreamDies spawns server-everything over stdio and
// kills it (SIGKILL) while it holds a keyed call: the call is
// indeterminate, never sent again, and the next call spawns the upstream
// anew.
func TestGatewayStdioUpstreamDies(t *testing.T) {
	dir := gatewayDir(t)
	g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil, "--upstream-command", "node "+everythingServer(t)+" stdio")
	body := `{"duration":20,"steps":20}`
	answered := make(chan reply, 1)
	go func() {
		r, _ := g.try("POST", "/tools/trigger-long-running-operation", gatewayToken, body, "Idempotency-Key", "die-1")
		answered <- r
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := g.do(t, "GET", "/v1/attempts/die-1", gatewayToken, "")
		if r.status == 200 && r.get("data.state") == "in_flight" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call was never in flight: %s", r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the upstream holds the call
	out, err := exec.Command("pgrep", "-P", fmt.Sprint(g.cmd.Process.Pid), "node").Output()
	if err != nil {
		t.Fatalf("find the spawned server: %v", err)
	}
	for _, pid := range strings.Fields(string(out)) {
		exec.Command("kill", "-9", pid).Run()
	}
	select {
	case r := <-answered:
		if r.status != 500 || r.get("code") != "EXECUTION_FAILED" || r.get("retryable") != false || r.get("details.reconcile") != "echo" {
			t.Fatalf("the call the dead upstream held: %d %s", r.status, r.raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after the upstream died")
	}
	g.do(t, "POST", "/tools/trigger-long-running-operation", gatewayToken, body, "Idempotency-Key", "die-1").want(t, 409, "IDEMPOTENCY_RESULT_INDETERMINATE")
	r := g.do(t, "POST", "/tools/echo", gatewayToken, `{"message":"again"}`).want(t, 200, "")
	if !strings.Contains(string(r.raw), "again") {
		t.Fatalf("echo after the respawn: %s", r.raw)
	}
}

// TestGatewayStdioUpstreamDiedBetweenCalls kills a spawned server-memory
// between two calls, so that the gateway sees neither its exit nor the
// end of its output: node holds the only read end of its stdin, and a
// shell around it stays, holding its stdout. The next keyed call's write
// breaks on the pipe before a byte of it goes, so it is 503
// UPSTREAM_UNAVAILABLE with the key free, not indeterminate; the same
// call again spawns the server anew and runs once.
func TestGatewayStdioUpstreamDiedBetweenCalls(t *testing.T) {
	dir := gatewayDir(t)
	// (The shell's stderr, the harness's pipe, is let go once node is gone,
	// so that a left-over sleep does not hold the test's log open.)
	wrapper := fmt.Sprintf(`sh -c "exec 3<&0 0</dev/null; node %s <&3 3<&- & exec 3<&-; wait; exec sleep 15 2>/dev/null"`, memoryServer(t))
	g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil,
		"--upstream-command", wrapper, "--upstream-env", "MEMORY_FILE_PATH="+filepath.Join(dir, "memory.jsonl"))
	g.do(t, "POST", "/tools/read_graph", gatewayToken, `{}`).want(t, 200, "")

	children := func(pid, name string) []string {
		out, _ := exec.Command("pgrep", "-P", pid, name).Output()
		return strings.Fields(string(out))
	}
	shells := children(fmt.Sprint(g.cmd.Process.Pid), "sh")
	if len(shells) != 1 {
		t.Fatalf("the spawned shell: %v", shells)
	}
	nodes := children(shells[0], "node")
	if len(nodes) != 1 {
		t.Fatalf("the server under the shell: %v", nodes)
	}
	exec.Command("kill", "-9", nodes[0]).Run()
	for deadline := time.Now().Add(5 * time.Second); len(children(shells[0], "node")) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not die")
		}
	}

	body := `{"entities":[{"name":"phoenix","entityType":"test","observations":["once"]}]}`
	r := g.do(t, "POST", "/tools/create_entities", gatewayToken, body, "Idempotency-Key", "gone-1").want(t, 503, "UPSTREAM_UNAVAILABLE")
	if r.get("retryable") != true {
		t.Fatalf("503 not retryable: %s", r.raw)
	}
	g.do(t, "GET", "/v1/attempts/gone-1", gatewayToken, "").want(t, 404, "NOT_FOUND")

	first := g.do(t, "POST", "/tools/create_entities", gatewayToken, body, "Idempotency-Key", "gone-1").want(t, 200, "")
	if !strings.Contains(string(first.raw), "phoenix") || first.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("the call once the server is spawned anew: %v %s", first.header, first.raw)
	}
	again := g.do(t, "POST", "/tools/create_entities", gatewayToken, body, "Idempotency-Key", "gone-1").want(t, 200, "")
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.raw) != string(first.raw) {
		t.Fatalf("the retry: %v %s", again.header, again.raw)
	}
	graph := g.do(t, "POST", "/tools/read_graph", gatewayToken, `{}`).want(t, 200, "")
	if n := strings.Count(string(graph.raw), `\"name\": \"phoenix\"`); n != 1 {
		t.Fatalf("the graph holds %d phoenix entities: %s", n, graph.raw)
	}
}
