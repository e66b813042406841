package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGatewayConfigRelaysProgress (issue 34 finding 3, f-gwperf): idem
// gateway --config in front of npm's server-everything over streamable
// HTTP passes the upstream's progress to the caller that asked for it, as
// one --upstream does (TestGatewayEverythingResourcesAndPrompts).
func TestGatewayConfigRelaysProgress(t *testing.T) {
	dir := gatewayDir(t)
	writeFile(t, filepath.Join(dir, "gateway.yaml"), fmt.Sprintf(`upstreams:
  - name: everything
    url: %s
    contracts: contracts.yaml
    include: [trigger-long-running-operation, echo]
`, startEverythingHTTP(t)))
	g := startGatewayConfig(t, dir, "gateway.yaml", nil)
	progress := make(chan float64, 100)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "e2e-progress" {
				progress <- req.Params.Progress
			}
		},
	}).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{gatewayToken}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	// One notification a step, a second apart, before the result (a last
	// one racing the result may be dropped).
	p := &mcp.CallToolParams{Name: "everything.trigger-long-running-operation", Arguments: map[string]any{"duration": 3, "steps": 3, "idempotencyKey": "e2e-config-long"}}
	p.SetProgressToken("e2e-progress")
	if res := mcpCall(t, cs, p); res.IsError {
		t.Fatalf("everything.trigger-long-running-operation: %s\n%s", resultJSON(res), g.logs())
	}
	if len(progress) < 2 {
		t.Fatalf("%d progress notifications reached the client, want the steps before the last", len(progress))
	}
}
