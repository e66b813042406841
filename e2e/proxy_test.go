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
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/internal/pgtest"
)

// The upstream of these tests is e2e/testdata/upstream/upstream.py, a
// small API in Python's standard library (python3 is on every machine
// of this project; nothing is installed for it).

// upstream is one running upstream.py.
type upstream struct {
	url  string
	cmd  *exec.Cmd
	done chan error
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	script, err := filepath.Abs("testdata/upstream/upstream.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", script, "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the Python upstream: %v", err)
	}
	u := &upstream{cmd: cmd, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				ready <- addr
			}
		}
		u.done <- cmd.Wait()
	}()
	select {
	case u.url = <-ready:
	case err := <-u.done:
		t.Fatalf("the upstream exited before listening: %v", err)
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the upstream did not listen within 20 s")
	}
	t.Cleanup(u.kill)
	return u
}

func (u *upstream) kill() {
	if u.cmd.ProcessState == nil {
		u.cmd.Process.Kill()
		<-u.done
	}
}

// upstreamStats is what the upstream saw (GET /_stats).
type upstreamStats struct {
	Effects map[string]int `json:"effects"`
	Keys    []struct {
		Kind string `json:"kind"`
		Key  string `json:"key"`
	} `json:"keys"`
	Reads int      `json:"reads"`
	Auth  []string `json:"auth"`
	Paths []string `json:"paths"`
}

func (u *upstream) stats(t *testing.T) upstreamStats {
	t.Helper()
	resp, err := http.Get(u.url + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s upstreamStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// effects counts the upstream's effects of kind.
func (s upstreamStats) effects(kind string) int {
	n := 0
	for _, k := range s.Keys {
		if k.Kind == kind {
			n++
		}
	}
	return n
}

const (
	proxyToken    = "proxy-agent-token"
	proxyApprover = "proxy-approver-token"
)

// writeServerDir writes, into a new directory, the tokens file of an
// agent (org acme) and an approver, and the contracts overlay contracts,
// for idem proxy and idem gateway.
func writeServerDir(t *testing.T, agentToken, approverToken, contracts string) string {
	t.Helper()
	dir := t.TempDir()
	hash := func(token string) string {
		sum := sha256.Sum256([]byte(token))
		return hex.EncodeToString(sum[:])
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tokens", fmt.Sprintf("sha256:%s acme agent-1 agent\nsha256:%s acme bob cli_session approver\n", hash(agentToken), hash(approverToken)))
	write("contracts.yaml", contracts)
	return dir
}

// proxyDir writes a tokens file (proxyToken: an agent of org acme) and
// the contracts overlay of createOrder into a new directory.
func proxyDir(t *testing.T) string {
	return writeServerDir(t, proxyToken, proxyApprover, `createOrder:
  kind: same_key_replay
  reconcile: listWidgets
  rationale: An order replays its original answer by key.
  timeoutMs: 5000
createPayout:
  kind: same_key_replay
  reconcile: listWidgets
  rationale: A payout replays by key, once a person approved it.
  sideEffect: external
  approval: always
`)
}

// startProxy runs idem proxy in front of upstreamURL, reading the
// document from the upstream.
func startProxy(t *testing.T, dir, store, upstreamURL string, args ...string) *server {
	t.Helper()
	all := append([]string{"proxy", "--upstream", upstreamURL, "--openapi", "/openapi.json",
		"--contracts", filepath.Join(dir, "contracts.yaml"), "--tokens-file", filepath.Join(dir, "tokens"),
		"--addr", "127.0.0.1:0", "--store", store, "--secret-key-file", filepath.Join(dir, "idem.key")}, args...)
	return start(t, dir, all...)
}

// TestProxy drives idem proxy in front of the Python upstream, on both
// stores: contracts, replay, 422, validation, key rules, fresh reads,
// 409 in flight and Prefer: wait, indeterminate after a 500, MCP.
func TestProxy(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := proxyDir(t)
			up := startUpstream(t)
			testProxy(t, up, startProxy(t, dir, store(t, dir), up.url))
		})
	}
}

func testProxy(t *testing.T, up *upstream, p *server) {
	post := func(path, key, body string) reply {
		if key == "" {
			return p.do(t, "POST", path, proxyToken, body)
		}
		return p.do(t, "POST", path, proxyToken, body, "Idempotency-Key", key)
	}

	t.Run("catalog contracts come from the extension, the overlay and the method", func(t *testing.T) {
		cat := p.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
		kinds := map[string]string{}
		for _, op := range cat.body["operations"].([]any) {
			o := op.(map[string]any)
			kinds[o["name"].(string)] = o["retry"].(map[string]any)["kind"].(string)
		}
		want := map[string]string{"createWidget": "same_key_replay", "createOrder": "same_key_replay",
			"createNote": "no_automatic_retry", "listWidgets": "fresh_read", "getWidget": "fresh_read"}
		for name, kind := range want {
			if kinds[name] != kind {
				t.Errorf("%s: kind %q, want %q (catalog %v)", name, kinds[name], kind, kinds)
			}
		}
		if !strings.Contains(p.logs(), "no declared retry contract") || !strings.Contains(p.logs(), "createNote") {
			t.Errorf("no start-up warning about createNote:\n%s", p.logs())
		}
		doc := p.do(t, "GET", "/openapi.json", "", "").want(t, 200, "")
		ext := field(doc.body, "paths./orders.post.x-idem-agent-retry.kind")
		if ext != "same_key_replay" {
			t.Errorf("the served OpenAPI document's createOrder extension: %v", ext)
		}
	})

	t.Run("idem call places a proxied path parameter in the path", func(t *testing.T) {
		// The catalog says where each argument travels (x-idem-in); without
		// it the CLI sent widgetId in the body of GET /widgets/.
		c := &cli{server: p.url, token: proxyToken, journal: filepath.Join(t.TempDir(), "journal")}
		r := c.run(t, "call", "getWidget", "--param", "widgetId=nope")
		if strings.Contains(r.stdout+r.stderr, "no route") || strings.Contains(r.stdout+r.stderr, "needs its path parameters") {
			t.Fatalf("idem call getWidget: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if paths := up.stats(t).Paths; paths[len(paths)-1] != "/widgets/nope" {
			t.Fatalf("the upstream got %v, want /widgets/nope last", paths)
		}
	})

	t.Run("same key replays the upstream answer, once", func(t *testing.T) {
		first := post("/widgets", "w-1", `{"name":"anvil"}`).want(t, 201, "")
		again := post("/widgets", "w-1", `{ "name" : "anvil" }`).want(t, 201, "")
		if string(again.raw) != string(first.raw) || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Idem-Execution-Id") == "" || again.header.Get("Idem-Execution-Id") != first.header.Get("Idem-Execution-Id") ||
			again.header.Get("Location") != first.header.Get("Location") || again.header.Get("X-Upstream") != "" {
			t.Fatalf("replay %s %v, first %s %v", again.raw, again.header, first.raw, first.header)
		}
		s := up.stats(t)
		exe := first.header.Get("Idem-Execution-Id")
		handlerKey := "ik_" + strings.TrimPrefix(exe, "exe_")
		if s.Effects[handlerKey] != 1 {
			t.Fatalf("the upstream saw the handler key %s %d times (effects %v)", handlerKey, s.Effects[handlerKey], s.Effects)
		}
		if s.Auth[len(s.Auth)-1] != "" {
			t.Fatalf("the caller's Authorization (idem's credential) was forwarded: %v", s.Auth)
		}
		x := p.do(t, "GET", "/v1/executions/"+exe, proxyToken, "").want(t, 200, "")
		if field(x.body, "data.outcome") != "succeeded" {
			t.Fatalf("execution %s", x.raw)
		}
		post("/widgets", "w-1", `{"name":"hammer"}`).want(t, 422, "IDEMPOTENCY_KEY_REUSED")
	})

	t.Run("invalid input never reaches the upstream", func(t *testing.T) {
		before := up.stats(t).effects("widget")
		post("/widgets", "w-bad", `{"name":5}`).want(t, 400, "INVALID_INPUT")
		post("/widgets", "w-bad2", `{"name":"a","colour":"red"}`).want(t, 400, "INVALID_INPUT")
		post("/orders", "o-bad", `{"item":"x","quantity":0}`).want(t, 400, "INVALID_INPUT")
		post("/orders", "o-big", `{"item":"x","quantity":9007199254740993}`).want(t, 400, "INVALID_INPUT")
		if after := up.stats(t).effects("widget"); after != before {
			t.Fatalf("the upstream ran %d widget effects on invalid input", after-before)
		}
	})

	t.Run("contracts decide key rules", func(t *testing.T) {
		post("/widgets", "", `{"name":"nokey"}`).want(t, 400, "IDEMPOTENCY_KEY_REQUIRED")
		post("/notes", "n-1", `{"text":"hi"}`).want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
		post("/notes", "", `{"text":"hi"}`).want(t, 201, "")
		post("/orders", "o-1", `{"item":"nail"}`).want(t, 201, "")
		if r := post("/orders", "o-1", `{"item":"nail"}`).want(t, 201, ""); r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("overlay contract: no replay: %v", r.header)
		}
	})

	t.Run("a fresh_read is never cached", func(t *testing.T) {
		before := up.stats(t).Reads
		p.do(t, "GET", "/widgets", proxyToken, "", "Idempotency-Key", "r-1").want(t, 200, "")
		r := p.do(t, "GET", "/widgets", proxyToken, "", "Idempotency-Key", "r-1").want(t, 200, "")
		if r.header.Get("Idempotent-Replayed") != "" || up.stats(t).Reads != before+2 {
			t.Fatalf("reads %d → %d, headers %v", before, up.stats(t).Reads, r.header)
		}
		p.do(t, "GET", "/widgets/nope", proxyToken, "").want(t, 404, "")
		// A parameter is forwarded percent-encoded once, and a dot segment
		// never (it would name another path upstream).
		p.do(t, "GET", "/widgets/a%20b%2Fc", proxyToken, "").want(t, 404, "")
		if paths := up.stats(t).Paths; paths[len(paths)-1] != "/widgets/a%20b%2Fc" {
			t.Fatalf("the upstream saw %q", paths[len(paths)-1])
		}
		p.do(t, "GET", "/widgets/%2E%2E", proxyToken, "").want(t, 400, "INVALID_INPUT")
	})

	t.Run("409 while the original runs", func(t *testing.T) {
		var wg sync.WaitGroup
		var first reply
		before := up.stats(t).effects("widget")
		wg.Go(func() { first = post("/widgets", "w-slow", `{"name":"slow","delayMs":1500}`) })
		deadline := time.Now().Add(5 * time.Second)
		for up.stats(t).effects("widget") == before { // the original is at the upstream
			if time.Now().After(deadline) {
				t.Fatal("the original never reached the upstream")
			}
			time.Sleep(10 * time.Millisecond)
		}
		post("/widgets", "w-slow", `{"name":"slow","delayMs":1500}`).want(t, 409, "IDEMPOTENCY_KEY_IN_FLIGHT")
		waited := p.do(t, "POST", "/widgets", proxyToken, `{"name":"slow","delayMs":1500}`, "Idempotency-Key", "w-slow", "Prefer", "wait=10")
		wg.Wait()
		first.want(t, 201, "")
		if waited.status != 201 || string(waited.raw) != string(first.raw) || waited.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("Prefer: wait answered %d %s %v", waited.status, waited.raw, waited.header)
		}
	})

	t.Run("an upstream 500 is indeterminate", func(t *testing.T) {
		r := post("/widgets", "w-boom", `{"name":"explode"}`)
		if r.status != 500 || !strings.Contains(string(r.raw), "exploded") {
			t.Fatalf("first answer %d %s", r.status, r.raw)
		}
		again := post("/widgets", "w-boom", `{"name":"explode"}`).want(t, 409, "IDEMPOTENCY_RESULT_INDETERMINATE")
		if again.get("details.reconcile") != "listWidgets" {
			t.Fatalf("details %s", again.raw)
		}
	})

	t.Run("an overlay's approval: always", func(t *testing.T) {
		req := post("/payouts", "pay-1", `{"amount":100}`).want(t, 403, "APPROVAL_REQUIRED")
		id, _ := req.get("details.approvalId").(string)
		if id == "" || up.stats(t).effects("payout") != 0 {
			t.Fatalf("approval required: %s, %d payouts", req.raw, up.stats(t).effects("payout"))
		}
		p.do(t, "POST", "/v1/approvals/"+id+"/approve", proxyToken, "").want(t, 403, "FORBIDDEN")
		p.do(t, "POST", "/v1/approvals/"+id+"/approve", proxyApprover, `{"reason":"ok"}`).want(t, 200, "")
		post("/payouts", "pay-1", `{"amount":100}`).want(t, 201, "")
		if r := post("/payouts", "pay-1", `{"amount":100}`).want(t, 201, ""); r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the approved payout's retry: %v", r.header)
		}
		post("/payouts", "pay-2", `{"amount":100}`).want(t, 403, "APPROVAL_REQUIRED") // the approval was used once
		if n := up.stats(t).effects("payout"); n != 1 {
			t.Fatalf("%d payouts, want 1", n)
		}
	})

	t.Run("MCP tools carry the contracts", func(t *testing.T) {
		cs := mcpHTTP(t, p, proxyToken)
		tools, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, tool := range tools.Tools {
			if tool.Name != "createWidget" {
				continue
			}
			found = true
			schema, _ := json.Marshal(tool.InputSchema)
			if !strings.Contains(string(schema), "idempotencyKey") || tool.Annotations == nil || tool.Annotations.ReadOnlyHint {
				t.Fatalf("createWidget tool %s, annotations %+v", schema, tool.Annotations)
			}
		}
		if !found {
			t.Fatal("no createWidget tool")
		}
		sc, res := toolCall(t, cs, "createWidget", map[string]any{"name": "mcp-widget", "idempotencyKey": "m-1"})
		if res.IsError || field(sc, "status") != float64(201) || field(sc, "data.name") != "mcp-widget" {
			t.Fatalf("tool result %v", sc)
		}
		// One rule on both surfaces: the upstream never sees idem's
		// credential.
		if s := up.stats(t); s.Auth[len(s.Auth)-1] != "" {
			t.Fatalf("an MCP call forwarded an Authorization: %v", s.Auth)
		}
		// A replay over MCP says how many attempts the execution made.
		replay, res := toolCall(t, cs, "createWidget", map[string]any{"name": "mcp-widget", "idempotencyKey": "m-1"})
		if res.IsError || field(replay, "meta.idempotency.replayed") != true || field(replay, "meta.attempts") != field(sc, "meta.attempts") ||
			field(sc, "meta.attempts") != float64(1) {
			t.Fatalf("MCP replay %v, first %v", replay, sc)
		}
		// The same intent over HTTP replays it.
		r := post("/widgets", "m-1", `{"name":"mcp-widget"}`).want(t, 201, "")
		if r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("HTTP after MCP: %v", r.header)
		}
		// And over stdio (idem mcp --server), the same intent is a replay.
		stdio := mcpStdio(t, p, proxyToken)
		sc, res = toolCall(t, stdio, "createWidget", map[string]any{"name": "mcp-widget", "idempotencyKey": "m-1"})
		if res.IsError || field(sc, "status") != float64(201) || field(sc, "meta.idempotency.replayed") != true ||
			field(sc, "meta.executionId") != r.header.Get("Idem-Execution-Id") {
			t.Fatalf("stdio tool result %v", sc)
		}
	})
}

// TestProxyUpstreamDown: nothing reached the upstream, so the key is
// free; an upstream killed while it holds the request leaves the record
// indeterminate.
func TestProxyUpstreamDown(t *testing.T) {
	up := startUpstream(t)
	dir := proxyDir(t)
	docPath := filepath.Join(dir, "openapi.json")
	resp, err := http.Get(up.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc := new(strings.Builder)
	_, _ = bufio.NewReader(resp.Body).WriteTo(doc)
	resp.Body.Close()
	if err := os.WriteFile(docPath, []byte(doc.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("refused before dispatch: the key is free", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String()
		ln.Close()
		p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "down.db"), closed, "--openapi", docPath)
		r := p.do(t, "POST", "/widgets", proxyToken, `{"name":"a"}`, "Idempotency-Key", "d-1").want(t, 503, "UPSTREAM_UNAVAILABLE")
		if r.get("retryable") != true {
			t.Fatalf("answer %s", r.raw)
		}
		p.do(t, "GET", "/v1/attempts/d-1", proxyToken, "").want(t, 404, "NOT_FOUND")
	})

	t.Run("killed mid-request: indeterminate", func(t *testing.T) {
		p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "kill.db"), up.url, "--openapi", docPath)
		done := make(chan reply, 1)
		go func() {
			done <- p.do(t, "POST", "/widgets", proxyToken, `{"name":"doomed","delayMs":3000}`, "Idempotency-Key", "k-1")
		}()
		deadline := time.Now().Add(5 * time.Second)
		for up.stats(t).effects("widget") == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the upstream never received the request")
			}
			time.Sleep(20 * time.Millisecond)
		}
		up.kill()
		r := <-done
		if r.status != 500 || r.get("code") != "EXECUTION_FAILED" || r.get("retryable") != false || r.get("details.reconcile") != "listWidgets" {
			t.Fatalf("answer %d %s", r.status, r.raw)
		}
		p.do(t, "POST", "/widgets", proxyToken, `{"name":"doomed","delayMs":3000}`, "Idempotency-Key", "k-1").want(t, 409, "IDEMPOTENCY_RESULT_INDETERMINATE")
	})
}

// TestProxyStormTwoInstances: two proxies share one PostgreSQL database
// in front of one upstream; 200 same-key requests at once, alternating
// between them, reach the upstream once.
func TestProxyStormTwoInstances(t *testing.T) {
	up := startUpstream(t)
	dir := proxyDir(t)
	url := pgtest.NewDatabase(t)
	proxies := []*server{startProxy(t, dir, url, up.url), startProxy(t, dir, url, up.url)}
	for _, wait := range []bool{false, true} {
		key := fmt.Sprintf("storm-%v", wait)
		body := fmt.Sprintf(`{"name":%q,"delayMs":300}`, key)
		headers := []string{"Idempotency-Key", key}
		if wait {
			headers = append(headers, "Prefer", "wait=10")
		}
		before := up.stats(t).effects("widget")
		const n = 200
		replies := make([]reply, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				replies[i], errs[i] = proxies[i%2].try("POST", "/widgets", proxyToken, body, headers...)
			})
		}
		close(start)
		wg.Wait()
		executions := map[string]bool{}
		for i, r := range replies {
			switch {
			case errs[i] != nil:
				t.Fatalf("request %d: %v", i, errs[i])
			case r.status == 201:
				executions[r.header.Get("Idem-Execution-Id")] = true
			case r.status == 409 && r.get("code") == "IDEMPOTENCY_KEY_IN_FLIGHT" && !wait:
			case r.status == 429 || r.status == 503:
			default:
				t.Fatalf("wait=%v: unexpected answer %d %s", wait, r.status, r.raw)
			}
		}
		if got := up.stats(t).effects("widget") - before; got != 1 || len(executions) != 1 {
			t.Fatalf("wait=%v: the upstream ran %d times, answers named %d executions; want exactly one", wait, got, len(executions))
		}
	}
}

// TestProxyReload: on SIGHUP idem proxy re-reads its document and overlay;
// the catalog and the OpenAPI document change together, MCP clients are
// told (notifications/tools/list_changed), a key keeps its record, and a
// document that fails to load or register keeps the running declarations.
func TestProxyReload(t *testing.T) {
	up := startUpstream(t)
	dir := proxyDir(t)
	resp, err := http.Get(up.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	docPath := filepath.Join(dir, "openapi.json")
	writeDoc := func(d any) {
		b, _ := json.Marshal(d)
		if err := os.WriteFile(docPath, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeDoc(doc)
	p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), up.url, "--openapi", docPath)
	kind := func(name string) any {
		cat := p.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
		for _, op := range cat.body["operations"].([]any) {
			if o := op.(map[string]any); o["name"] == name {
				return field(o, "retry.kind")
			}
		}
		return nil
	}
	changed := make(chan struct{}, 8)
	transport := &mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{proxyToken}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	first := p.do(t, "POST", "/widgets", proxyToken, `{"name":"before"}`, "Idempotency-Key", "rl-1").want(t, 201, "")
	if kind("createNote") != "no_automatic_retry" {
		t.Fatalf("createNote starts as %v", kind("createNote"))
	}

	// A reload that changes nothing tells MCP clients nothing and logs its
	// warnings no second time (issue 26, item 4).
	reloads := strings.Count(p.logs(), `"msg":"reloaded"`)
	p.cmd.Process.Signal(syscall.SIGHUP)
	for wait := time.Now().Add(10 * time.Second); strings.Count(p.logs(), `"msg":"reloaded"`) == reloads; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("no reload after SIGHUP:\n%s", p.logs())
		}
	}
	select {
	case <-changed:
		t.Fatal("an unchanged reload told the MCP client tools/list_changed")
	case <-time.After(300 * time.Millisecond): // 30 times the SDK's notification debounce
	}
	if n := strings.Count(p.logs(), "no declared retry contract"); n != 1 {
		t.Fatalf("the start-up warning was logged %d times after an unchanged reload:\n%s", n, p.logs())
	}

	// Declare createNote's contract in the document, and reload.
	note := field(doc, "paths./notes.post").(map[string]any)
	note["x-idem-agent-retry"] = map[string]any{"kind": "same_key_replay", "reconcile": "listWidgets", "rationale": "Notes replay by key."}
	writeDoc(doc)
	p.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for kind("createNote") != "same_key_replay" {
		if time.Now().After(deadline) {
			t.Fatalf("the catalog did not change after SIGHUP:\n%s", p.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ext := field(p.do(t, "GET", "/openapi.json", "", "").body, "paths./notes.post.x-idem-agent-retry.kind"); ext != "same_key_replay" {
		t.Fatalf("the OpenAPI document did not change with the catalog: %v", ext)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the MCP client was not told that the tools changed")
	}
	p.do(t, "POST", "/notes", proxyToken, `{"text":"hi"}`, "Idempotency-Key", "rl-note").want(t, 201, "")
	again := p.do(t, "POST", "/widgets", proxyToken, `{"name":"before"}`, "Idempotency-Key", "rl-1").want(t, 201, "")
	if again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Idem-Execution-Id") != first.header.Get("Idem-Execution-Id") {
		t.Fatalf("a key across the reload: %v", again.header)
	}

	// A document that does not register (a reconcile naming nothing) and
	// one that does not parse: both keep the running declarations.
	note["x-idem-agent-retry"] = map[string]any{"kind": "same_key_replay", "reconcile": "noSuchRead", "rationale": "x"}
	writeDoc(doc)
	p.cmd.Process.Signal(syscall.SIGHUP)
	for !strings.Contains(p.logs(), "noSuchRead") {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("no reload failure logged:\n%s", p.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(docPath, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(500 * time.Millisecond)
	if kind("createNote") != "same_key_replay" || !strings.Contains(p.logs(), "reload failed") {
		t.Fatalf("after failed reloads createNote is %v; log:\n%s", kind("createNote"), p.logs())
	}
	p.do(t, "POST", "/notes", proxyToken, `{"text":"hi"}`, "Idempotency-Key", "rl-note").want(t, 201, "")
}

// TestProxyCrash kills idem proxy (SIGKILL) while the upstream holds a
// keyed request, and restarts it on the same store: the same key answers
// 409 in flight until the lease passes, then indeterminate; the upstream
// ran it once and never again.
func TestProxyCrash(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			up := startUpstream(t)
			dir := proxyDir(t)
			url := store(t, dir)
			contracts := filepath.Join(dir, "short.yaml")
			if err := os.WriteFile(contracts, []byte("createWidget:\n  kind: same_key_replay\n  timeoutMs: 2500\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--contracts", contracts, "--lease-grace", "1s"}
			a := startProxy(t, dir, url, up.url, args...)
			body := `{"name":"crash","delayMs":2000}`
			go func() { _, _ = a.try("POST", "/widgets", proxyToken, body, "Idempotency-Key", "c-1") }()
			deadline := time.Now().Add(5 * time.Second)
			for up.stats(t).effects("widget") == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the upstream never received the request")
				}
				time.Sleep(10 * time.Millisecond)
			}
			a.kill(t)
			b := startProxy(t, dir, url, up.url, args...)
			b.do(t, "POST", "/widgets", proxyToken, body, "Idempotency-Key", "c-1").want(t, 409, "IDEMPOTENCY_KEY_IN_FLIGHT")
			deadline = time.Now().Add(10 * time.Second)
			for {
				r := b.do(t, "POST", "/widgets", proxyToken, body, "Idempotency-Key", "c-1")
				if r.status == 409 && r.get("code") == "IDEMPOTENCY_RESULT_INDETERMINATE" {
					break
				}
				if r.status != 409 || r.get("code") != "IDEMPOTENCY_KEY_IN_FLIGHT" || time.Now().After(deadline) {
					t.Fatalf("after the crash: %d %s", r.status, r.raw)
				}
				time.Sleep(200 * time.Millisecond)
			}
			time.Sleep(2500 * time.Millisecond) // the upstream finishes the request it held
			if n := up.stats(t).effects("widget"); n != 1 {
				t.Fatalf("the upstream ran the request %d times, want 1", n)
			}
		})
	}
}
