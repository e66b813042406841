package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGatewayTypeScriptSDK runs e2e/testdata/tsclient.mjs, a client of the
// official MCP TypeScript SDK (tsSDKPackage), against idem gateway in
// front of server-memory (stdio), over streamable HTTP with the bearer
// token: the tools carry annotations from their contracts and the
// same_key_replay tools an idempotencyKey argument; a keyed call retried
// with the key as the flat argument and in _meta gets the identical
// CallToolResult, as does a first call keyed in _meta; the graph shows one
// upstream effect of each; the key reused for other arguments is an error
// result with IDEMPOTENCY_KEY_REUSED.
func TestGatewayTypeScriptSDK(t *testing.T) {
	dir := gatewayDir(t)
	g := memoryGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), filepath.Join(dir, "memory.jsonl"))
	runTSClient(t, g, "")
}

// TestGatewayConfigTypeScriptSDK runs tsclient.mjs against idem gateway
// --config fronting server-memory (as "memory") and server-everything:
// the same checks, on the names memory.<tool>.
func TestGatewayConfigTypeScriptSDK(t *testing.T) {
	dir := gatewayDir(t)
	writeMemoryEverythingConfig(t, dir)
	runTSClient(t, startGatewayConfig(t, dir, "gateway.yaml", nil), "memory.")
}

// runTSClient runs tsclient.mjs against the gateway g, which serves
// server-memory's tools as prefix<tool>, and checks what it printed.
func runTSClient(t *testing.T, g *server, prefix string) {
	t.Helper()
	// The script beside a node_modules holding the SDK, as a newcomer has it.
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(mcpServers(t), "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "tsclient.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "tsclient.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(work, "tsclient.mjs"))
	cmd.Env = append(os.Environ(), "IDEM_URL="+g.url, "IDEM_TOKEN="+gatewayToken, "IDEM_TOOL_PREFIX="+prefix)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("tsclient.mjs: %v\n%s\n%s", err, out, exit.Stderr)
		}
		t.Fatalf("tsclient.mjs: %v", err)
	}
	type tool struct {
		Annotations    map[string]bool `json:"annotations"`
		IdempotencyKey map[string]any  `json:"idempotencyKey"`
		Required       []string        `json:"required"`
	}
	var got struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Tools           map[string]tool `json:"tools"`
		First           json.RawMessage `json:"first"`
		Retry           json.RawMessage `json:"retry"`
		RetryMeta       json.RawMessage `json:"retryMeta"`
		Observe         json.RawMessage `json:"observe"`
		ObserveRetry    json.RawMessage `json:"observeRetry"`
		Graph           struct {
			Entities []struct {
				Name         string   `json:"name"`
				Observations []string `json:"observations"`
			} `json:"entities"`
		} `json:"graph"`
		Reuse map[string]any `json:"reuse"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("tsclient.mjs printed %s: %v", out, err)
	}
	t.Logf("the TypeScript SDK (%s) negotiated MCP %s", tsSDKPackage, got.ProtocolVersion)

	ce, rg := got.Tools["create_entities"], got.Tools["read_graph"]
	if ce.Annotations["readOnlyHint"] || ce.Annotations["idempotentHint"] || !rg.Annotations["readOnlyHint"] || !rg.Annotations["idempotentHint"] {
		t.Errorf("annotations: create_entities %v, read_graph %v", ce.Annotations, rg.Annotations)
	}
	if ce.IdempotencyKey["type"] != "string" || !slices.Contains(ce.Required, "idempotencyKey") {
		t.Errorf("create_entities' input schema: idempotencyKey %v, required %v", ce.IdempotencyKey, ce.Required)
	}
	if rg.IdempotencyKey != nil || got.Tools["delete_entities"].IdempotencyKey != nil {
		t.Errorf("an idempotencyKey argument on a tool that takes no key: %+v", got.Tools)
	}

	if !strings.Contains(string(got.First), `"bellows"`) || strings.Contains(string(got.First), `"isError":true`) {
		t.Fatalf("create_entities: %s", got.First)
	}
	// The served _meta says which answer is a replay (issue 34 item 5);
	// the rest is the stored result.
	first, retry, retryMeta := servedResult(t, got.First), servedResult(t, got.Retry), servedResult(t, got.RetryMeta)
	if retry.stored != first.stored || retryMeta.stored != first.stored || first.replayed || !retry.replayed || !retryMeta.replayed {
		t.Fatalf("the retries are not replays of the first result:\nfirst %s\nretry %s\nretry, key in _meta %s", got.First, got.Retry, got.RetryMeta)
	}
	if observe, again := servedResult(t, got.Observe), servedResult(t, got.ObserveRetry); !strings.Contains(observe.stored, `"pumped"`) || again.stored != observe.stored || !again.replayed {
		t.Fatalf("add_observations keyed in _meta: %s, its retry %s", got.Observe, got.ObserveRetry)
	}
	// server-memory answers a second create_entities of an existing entity
	// with an empty list, and a second add_observations with none added:
	// the identical answers are replays, and the graph shows one effect.
	if e := got.Graph.Entities; len(e) != 1 || e[0].Name != "bellows" || !slices.Equal(e[0].Observations, []string{"leather", "pumped"}) {
		t.Fatalf("the graph after the retries: %+v", got.Graph)
	}

	// create_entities declares an outputSchema, which the TypeScript SDK
	// checks structuredContent against even on an error: idem's problem is
	// in _meta (issue 34 item 7).
	problem, _ := got.Reuse["_meta"].(map[string]any)["io.idem/problem"].(map[string]any)
	if got.Reuse["isError"] != true || problem["code"] != "IDEMPOTENCY_KEY_REUSED" || got.Reuse["structuredContent"] != nil {
		t.Fatalf("the key reused for other arguments: %v", got.Reuse)
	}
	r := g.do(t, "GET", "/v1/attempts/ts-bellows", gatewayToken, "").want(t, 200, "")
	if r.get("data.state") != "completed" {
		t.Fatalf("the key's record: %s", r.raw)
	}
}

// served is a tool result as the TypeScript SDK printed it: the stored
// part (without _meta) and idem's io.idem/replayed.
type served struct {
	stored   string
	replayed bool
}

func servedResult(t *testing.T, raw json.RawMessage) served {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	var meta struct {
		Replayed *bool `json:"io.idem/replayed"`
	}
	if json.Unmarshal(m["_meta"], &meta) != nil || meta.Replayed == nil {
		t.Fatalf("no _meta io.idem/replayed in %s", raw)
	}
	delete(m, "_meta")
	stored, _ := json.Marshal(m)
	return served{string(stored), *meta.Replayed}
}

// writeMemoryEverythingConfig writes dir/gateway.yaml: server-memory as
// "memory" (its contracts from gatewayDir's contracts.yaml) and
// server-everything over stdio as "everything".
func writeMemoryEverythingConfig(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "gateway.yaml"), fmt.Sprintf(`upstreams:
  - name: memory
    command: node
    args: [%q]
    env: {MEMORY_FILE_PATH: %q}
    contracts: contracts.yaml
  - name: everything
    command: node
    args: [%q, stdio]
`, memoryServer(t), filepath.Join(dir, "memory.jsonl"), everythingServer(t)))
}
