package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGatewaySubscriptionAcrossAnUpstreamRestart: a client of idem
// gateway --config subscribed to a resource of server-everything (over
// streamable HTTP) keeps getting its notifications/resources/updated
// after server-everything was killed and started again on its port: the
// gateway subscribes its new upstream session to the resources its
// clients still hold. server-everything sends updates of a session's
// subscriptions every 5 s once its tool toggle-subscriber-updates was
// called on that session, so the test calls it on each.
func TestGatewaySubscriptionAcrossAnUpstreamRestart(t *testing.T) {
	dir := gatewayDir(t)
	port := freePort(t)
	kill := everythingOn(t, port)
	writeFile(t, filepath.Join(dir, "gateway.yaml"), fmt.Sprintf(`upstreams:
  - name: everything
    url: http://127.0.0.1:%s/mcp
`, port))
	g := startGatewayConfig(t, dir, "gateway.yaml", nil, "--reconnect-max-wait", "1s")
	updated := make(chan string, 100)
	transport := &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{gatewayToken}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}).Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	const uri = "demo://resource/static/document/features.md"
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	toggle := func() {
		t.Helper()
		// Right after a restart the gateway's kept connection may fail the
		// first call, unsent (503, the key free): call again.
		waitFor(t, 30*time.Second, "toggle-subscriber-updates answered", func() bool {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "everything.toggle-subscriber-updates", Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Logf("toggle-subscriber-updates: %v %s", err, resultJSON(res))
				return false
			}
			return true
		})
	}
	wait := func(when string) {
		t.Helper()
		for {
			select {
			case got := <-updated:
				if got == uri {
					t.Logf("%s: resources/updated %s", when, got)
					return
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("%s: no resources/updated of %s within 15 s:\n%s", when, uri, g.logs())
			}
		}
	}
	toggle()
	wait("before the restart")

	kill()
	everythingOn(t, port)
	t.Log("server-everything restarted")
	toggle() // on the gateway's new upstream session
	for len(updated) > 0 {
		<-updated // sent before the restart
	}
	wait("after the restart")
}
