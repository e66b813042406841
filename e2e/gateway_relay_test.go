package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGatewaySamplingAndElicitation runs idem gateway in front of
// server-everything (over stdio, and over streamable HTTP, where the
// requests come on the call's SSE stream), whose trigger-sampling-request
// and trigger-elicitation-request tools ask the client of the call: an
// SDK client that declared sampling and elicitation gets both requests
// through the gateway and its answers reach the tool; one that declared
// neither gets the tool's error saying so. Over HTTP, the upstream's
// simulated logging, which belongs to no call, reaches no client (issue
// 34 item 4).
func TestGatewaySamplingAndElicitation(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		dir := gatewayDir(t)
		g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil, "--upstream-command", "node "+everythingServer(t)+" stdio")
		samplingAndElicitation(t, g, false)
	})
	t.Run("http", func(t *testing.T) {
		dir := gatewayDir(t)
		g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil, "--upstream", startEverythingHTTP(t), "--log-level", "debug")
		samplingAndElicitation(t, g, true)
	})
	t.Run("typescript", func(t *testing.T) {
		dir := gatewayDir(t)
		g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil, "--upstream-command", "node "+everythingServer(t)+" stdio")
		// The script beside a node_modules holding the SDK.
		work := t.TempDir()
		if err := os.Symlink(filepath.Join(mcpServers(t), "node_modules"), filepath.Join(work, "node_modules")); err != nil {
			t.Fatal(err)
		}
		script, err := os.ReadFile(filepath.Join("testdata", "tssampling.mjs"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "tssampling.mjs"), script, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", filepath.Join(work, "tssampling.mjs"))
		cmd.Env = append(os.Environ(), "IDEM_URL="+g.url, "IDEM_TOKEN="+gatewayToken)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tssampling.mjs: %v\n%s\n%s", err, out, stderr.String())
		}
		var got struct {
			ProtocolVersion string
			Asked           []string
			Result          struct {
				IsError bool
				Content []struct{ Text string }
			}
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("tssampling.mjs: %s", out)
		}
		t.Logf("the TypeScript SDK negotiated MCP %s", got.ProtocolVersion)
		if len(got.Asked) != 1 || !strings.Contains(got.Asked[0], "from TypeScript") ||
			got.Result.IsError || len(got.Result.Content) == 0 || !strings.Contains(got.Result.Content[0].Text, "the TypeScript client's answer") {
			t.Fatalf("tssampling.mjs: %s", out)
		}
	})
}

func samplingAndElicitation(t *testing.T, g *server, background bool) {
	logs := make(chan string, 100)
	asked := make(chan string, 10)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			if text, ok := req.Params.Messages[0].Content.(*mcp.TextContent); ok {
				asked <- text.Text
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "e2e-model", Content: &mcp.TextContent{Text: "the e2e client's answer"}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada Lovelace"}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(req.Params.Data) },
	})
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{gatewayToken}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	res := mcpCall(t, cs, &mcp.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "hello", "maxTokens": 5}})
	if res.IsError || !strings.Contains(resultJSON(res), "the e2e client's answer") {
		t.Fatalf("trigger-sampling-request: %s\n%s", resultJSON(res), g.logs())
	}
	if q := <-asked; !strings.Contains(q, "hello") {
		t.Fatalf("the client was asked %q", q)
	}
	res = mcpCall(t, cs, &mcp.CallToolParams{Name: "trigger-elicitation-request", Arguments: map[string]any{}})
	if res.IsError || !strings.Contains(resultJSON(res), "Ada Lovelace") {
		t.Fatalf("trigger-elicitation-request: %s\n%s", resultJSON(res), g.logs())
	}
	<-asked

	// A client that declared neither: the tool fails, saying why.
	plain := mcpHTTP(t, g, gatewayToken)
	res = mcpCall(t, plain, &mcp.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "hello", "maxTokens": 5}})
	if !res.IsError || !strings.Contains(resultJSON(res), "the client calling through idem gateway did not declare sampling") {
		t.Fatalf("trigger-sampling-request without sampling: %s", resultJSON(res))
	}
	select {
	case q := <-asked:
		t.Fatalf("the first client was asked %q for the second's call", q)
	default:
	}
	if !background {
		return
	}

	// The upstream's simulated logging is its session's, sent on its
	// standalone stream every 5 s: no client of the gateway gets it, not
	// even the one whose call turned it on.
	if err := cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	res = mcpCall(t, cs, &mcp.CallToolParams{Name: "toggle-simulated-logging", Arguments: map[string]any{}})
	if res.IsError || !strings.Contains(resultJSON(res), "Started simulated") {
		t.Fatalf("toggle-simulated-logging: %s", resultJSON(res))
	}
	waitFor(t, 30*time.Second, "the gateway's debug line of a log message it did not relay", func() bool {
		return strings.Contains(g.logs(), "the upstream's log message is not relayed")
	})
	select {
	case m := <-logs:
		t.Fatalf("a log message of no call reached a client: %q", m)
	default:
	}
}
