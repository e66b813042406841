package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// demoOperations are the operations of SPEC §12, every one a tool.
var demoOperations = []string{
	"agreement.create", "agreement.list", "agreement.preview", "auth.context_token",
	"backend.bind", "backend.list", "business.create", "business.list", "business.show",
	"limit.create", "limit.list", "limit.update", "order.refund", "order.show",
	"serviceaccount.approve", "serviceaccount.show", "token.list", "token.mint",
	"webhook.create", "webhook.deliveries", "webhook.list", "webhook.trigger",
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpHTTP connects the SDK client to {server}/mcp as token.
func mcpHTTP(t *testing.T, s *server, token string) *mcp.ClientSession {
	t.Helper()
	transport := &mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatalf("connect to %s/mcp: %v", s.url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpStdio starts `idem mcp --server {server} --token token` and connects
// the SDK client to it.
func mcpStdio(t *testing.T, s *server, token string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, "mcp", "--server", s.url, "--token", token)
	cmd.Env = append(cmd.Environ(), "IDEM_SERVER=", "IDEM_TOKEN=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start idem mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("idem mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// toolCall calls a tool and returns its structuredContent as an object.
func toolCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("call %s: structuredContent %s is not an object", name, raw)
	}
	return out, res
}

// field reads a dotted path of a decoded object.
func field(v any, path string) any {
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	return v
}

func toolNames(t *testing.T, cs *mcp.ClientSession) ([]string, []byte) {
	t.Helper()
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	raw, _ := json.Marshal(list.Tools)
	return names, raw
}

// TestMCP drives the MCP surface of `idem serve --demo` with the SDK's
// client, over streamable HTTP at /mcp and over stdio through `idem mcp`.
func TestMCP(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir)
	cs := mcpHTTP(t, s, "demo-agent")

	names, overHTTP := toolNames(t, cs)
	if !slices.Equal(names, demoOperations) {
		t.Fatalf("tools/list = %v, want the demo operations %v", names, demoOperations)
	}

	refund := map[string]any{"id": "ord_1", "amount": 100, "idempotencyKey": "mcp-refund-1"}
	first, res := toolCall(t, cs, "order.refund", refund)
	if res.IsError || field(first, "data.refund.amount") != 100.0 || field(first, "meta.operation") != "order.refund" ||
		field(first, "meta.idempotency.replayed") != false {
		t.Fatalf("keyed order.refund: isError %v, %v", res.IsError, first)
	}
	again, _ := toolCall(t, cs, "order.refund", refund)
	if field(again, "meta.idempotency.replayed") != true || field(again, "meta.executionId") != field(first, "meta.executionId") {
		t.Fatalf("same call again is not a replay: %v", again)
	}
	// The same intent over HTTP replays too.
	viaHTTP := s.do(t, "POST", "/v1/orders/ord_1/refund", "demo-agent", `{"amount":100}`, "Idempotency-Key", "mcp-refund-1").want(t, 200, "")
	if viaHTTP.header.Get("Idempotent-Replayed") != "true" || viaHTTP.get("meta.executionId") != field(first, "meta.executionId") {
		t.Fatalf("HTTP after MCP: %s", viaHTTP.raw)
	}
	problem, res := toolCall(t, cs, "order.refund", map[string]any{"id": "ord_1", "amount": 100})
	if !res.IsError || problem["code"] != "IDEMPOTENCY_KEY_REQUIRED" {
		t.Fatalf("refund without a key: %v", problem)
	}

	t.Run("cancelled slow refund", func(t *testing.T) { testMCPCancelledRefund(t, s, cs) })

	t.Run("stdio", func(t *testing.T) {
		stdio := mcpStdio(t, s, "demo-agent")
		names, overStdio := toolNames(t, stdio)
		if !bytes.Equal(overStdio, overHTTP) {
			t.Fatalf("idem mcp lists other tools than /mcp:\n%v", names)
		}
		// A key used over streamable HTTP replays over stdio.
		replay, _ := toolCall(t, stdio, "order.refund", refund)
		if field(replay, "meta.idempotency.replayed") != true || field(replay, "meta.executionId") != field(first, "meta.executionId") {
			t.Fatalf("stdio replay of the HTTP MCP call: %v", replay)
		}
		args := map[string]any{"id": "ord_2", "amount": 250, "idempotencyKey": "mcp-stdio-1"}
		one, res := toolCall(t, stdio, "order.refund", args)
		if res.IsError || field(one, "data.refund.amount") != 250.0 || field(one, "meta.idempotency.replayed") != false {
			t.Fatalf("keyed call over stdio: %v", one)
		}
		two, _ := toolCall(t, stdio, "order.refund", args)
		if field(two, "meta.idempotency.replayed") != true || field(two, "meta.executionId") != field(one, "meta.executionId") ||
			!jsonEqual(two["data"], one["data"]) {
			t.Fatalf("replay over stdio: %v, first %v", two, one)
		}
		viaStreamable, _ := toolCall(t, cs, "order.refund", args)
		if field(viaStreamable, "meta.idempotency.replayed") != true || field(viaStreamable, "meta.executionId") != field(one, "meta.executionId") {
			t.Fatalf("streamable replay of the stdio call: %v", viaStreamable)
		}
		problem, res := toolCall(t, stdio, "order.refund", map[string]any{"id": "ord_2", "amount": 250})
		if !res.IsError || problem["code"] != "IDEMPOTENCY_KEY_REQUIRED" {
			t.Fatalf("stdio refund without a key: %v", problem)
		}
	})

	// Shutdown does not wait for the client's open event stream.
	began := time.Now()
	if err := s.stop(t); err != nil {
		t.Fatalf("idem serve exited with %v after SIGTERM:\n%s", err, s.logs())
	}
	if took := time.Since(began); took > 4*time.Second || strings.Contains(s.logs(), "shutdown bound passed") {
		t.Fatalf("shutdown took %s with an MCP client connected:\n%s", took, s.logs())
	}
}

// testMCPCancelledRefund cancels a slow keyed refund from the client: the
// execution is finalized once as CANCELLED, never retried, the gateway is
// never called, and the key is indeterminate from then on.
func testMCPCancelledRefund(t *testing.T, s *server, cs *mcp.ClientSession) {
	const key = "mcp-cancel-1"
	args := map[string]any{"id": "ord_3", "amount": 100, "idempotencyKey": key, "simulate": map[string]any{"delayMs": 60000}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "order.refund", Arguments: args})
		errc <- err
	}()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if r := s.do(t, "GET", "/v1/attempts/"+key, "demo-agent", ""); r.status == 200 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the refund was never reserved")
		}
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call returned %v", err)
	}
	var attempt reply
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		attempt = s.do(t, "GET", "/v1/attempts/"+key, "demo-agent", "").want(t, 200, "")
		if attempt.get("data.state") != "in_flight" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the cancelled refund is still in flight: %s", attempt.raw)
		}
	}
	if attempt.get("data.state") != "indeterminate" {
		t.Fatalf("attempt after the cancellation: %s", attempt.raw)
	}
	x := s.do(t, "GET", "/v1/executions/"+attempt.get("data.executionId").(string), "demo-agent", "").want(t, 200, "")
	var finals []map[string]any
	for _, e := range x.get("data.events").([]any) {
		ev := e.(map[string]any)
		switch ev["type"] {
		case "execution.succeeded", "execution.failed":
			finals = append(finals, ev)
		case "execution.retried":
			t.Fatalf("the cancelled refund was retried: %s", x.raw)
		}
	}
	if len(finals) != 1 || finals[0]["code"] != "CANCELLED" || x.get("data.code") != "CANCELLED" {
		t.Fatalf("execution of the cancelled refund: %s", x.raw)
	}
	for _, e := range ledgerEffects(t, s, "demo-agent") {
		if e["requestKey"] == key {
			t.Fatalf("the cancelled refund reached the gateway: %v", e)
		}
	}
	problem, res := toolCall(t, cs, "order.refund", args)
	if !res.IsError || problem["code"] != "IDEMPOTENCY_RESULT_INDETERMINATE" || field(problem, "details.reconcile") != "order.show" {
		t.Fatalf("same-key retry after the cancellation: %v", problem)
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// TestMCPStdioAnswersPipedRequests pipes a whole session into `idem mcp`
// with stdin closed behind it, as a shell pipe does: every request read
// before the end of input is answered before the process exits.
func TestMCPStdioAnswersPipedRequests(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir)
	const calls = 10
	var in bytes.Buffer
	in.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}` + "\n")
	in.WriteString(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")
	for i := 1; i <= calls; i++ {
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"business.create","arguments":{"slug":"piped-%d","name":"Piped %d","idempotencyKey":"piped-key-%d"}}}`+"\n", i, i, i, i)
	}
	cmd := exec.Command(binary, "mcp", "--server", s.url, "--token", "demo-agent")
	cmd.Env = append(cmd.Environ(), "IDEM_SERVER=", "IDEM_TOKEN=")
	cmd.Stdin = &in // exec closes the pipe once it is copied: EOF right after the last request
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("idem mcp: %v\n%s", err, stderr.String())
	}
	answered := map[int]bool{}
	for line := range strings.Lines(stdout.String()) {
		var msg struct {
			ID     *int `json:"id"`
			Result struct {
				IsError bool `json:"isError"`
			} `json:"result"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil || msg.ID == nil {
			t.Fatalf("stdout line %q is not an answer: %v", line, err)
		}
		if *msg.ID > 0 && (msg.Error != nil || msg.Result.IsError) {
			t.Errorf("call %d failed: %s", *msg.ID, line)
		}
		answered[*msg.ID] = true
	}
	var missing []int
	for i := 0; i <= calls; i++ {
		if !answered[i] {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("requests %v were not answered; stdout:\n%s\nstderr:\n%s", missing, stdout.String(), stderr.String())
	}
	for i := 1; i <= calls; i++ {
		s.do(t, "GET", fmt.Sprintf("/v1/businesses/piped-%d", i), "demo-agent", "").want(t, 200, "")
	}
}

// TestMCPOrigin: /mcp of the built server refuses a foreign Origin with
// 403 FORBIDDEN and accepts its own, an --allowed-origins one and none.
func TestMCPOrigin(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir, "--allowed-origins", "https://app.example.com, http://localhost:3000")
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"o","version":"1"}}}`
	for origin, want := range map[string]int{
		"":                        200,
		s.url:                     200,
		"https://app.example.com": 200,
		"http://localhost:3000":   200,
		"http://evil.example":     403,
		"https://app.example.org": 403,
	} {
		headers := []string{"Accept", "application/json, text/event-stream"}
		if origin != "" {
			headers = append(headers, "Origin", origin)
		}
		r := s.do(t, "POST", "/mcp", "demo-agent", initialize, headers...)
		if r.status != want {
			t.Errorf("Origin %q: %d %s, want %d", origin, r.status, r.raw, want)
		}
		if want == 403 && (r.body["code"] != "FORBIDDEN" || !strings.Contains(r.body["detail"].(string), "--allowed-origins")) {
			t.Errorf("Origin %q: %s is not the FORBIDDEN problem naming --allowed-origins", origin, r.raw)
		}
	}
}
