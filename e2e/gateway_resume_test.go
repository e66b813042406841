package e2e

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGatewayResultOnAResumedStream (issue 38): idem gateway in front of
// an upstream that polls (SEP-1699, e2e/testdata/gwpolling): each call's
// stream closes after its priming event, the first resumption ends empty
// and the second carries the result. Keyed and unkeyed, over HTTP and MCP,
// the caller gets the result once, the same-key retry its replay, and the
// upstream ran each call once.
func TestGatewayResultOnAResumedStream(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gwpolling")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/gwpolling").CombinedOutput(); err != nil {
		t.Fatalf("build gwpolling: %v\n%s", err, out)
	}
	up := launch(t, exec.Command(bin), "gwpolling")
	dir := writeServerDir(t, gatewayToken, gatewayApprover, `add:
  kind: same_key_replay
  reconcile: total
  rationale: Adding twice would count twice; a replay is the original answer.
`)
	g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil, "--upstream", up.url+"/mcp")

	first := g.do(t, "POST", "/tools/add", gatewayToken, `{"n":5}`, "Idempotency-Key", "poll-http").want(t, 200, "")
	if !strings.Contains(string(first.raw), `"total":5`) {
		t.Fatalf("keyed over HTTP: %s\n%s", first.raw, g.logs())
	}
	again := g.do(t, "POST", "/tools/add", gatewayToken, `{"n":5}`, "Idempotency-Key", "poll-http").want(t, 200, "")
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.raw) != string(first.raw) {
		t.Fatalf("the same key again: %v %s, first %s", again.header, again.raw, first.raw)
	}
	if total := g.do(t, "POST", "/tools/total", gatewayToken, `{}`).want(t, 200, ""); !strings.Contains(string(total.raw), `"total":5`) {
		t.Fatalf("unkeyed over HTTP: %s", total.raw)
	}

	transport := &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{gatewayToken}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	keyed := &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 2, "idempotencyKey": "poll-mcp"}}
	res := mcpCall(t, cs, keyed)
	if res.IsError || !strings.Contains(resultJSON(res), `"total":7`) {
		t.Fatalf("keyed over MCP: %s\n%s", resultJSON(res), g.logs())
	}
	// The replay is the first answer, its _meta saying so.
	if replay := mcpCall(t, cs, keyed); replay.Meta["io.idem/replayed"] != true ||
		strings.Replace(resultJSON(replay), `"io.idem/replayed":true`, `"io.idem/replayed":false`, 1) != resultJSON(res) {
		t.Fatalf("the same key over MCP: %s, first %s", resultJSON(replay), resultJSON(res))
	}
	if res := mcpCall(t, cs, &mcp.CallToolParams{Name: "total", Arguments: map[string]any{}}); res.IsError || !strings.Contains(resultJSON(res), `"total":7`) {
		t.Fatalf("unkeyed over MCP: %s", resultJSON(res))
	}
	if n := strings.Count(up.logs(), "tools/call add:"); n != 2 {
		t.Fatalf("the upstream ran add %d times, want 2:\n%s", n, up.logs())
	}
}
