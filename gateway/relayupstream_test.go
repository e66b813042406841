package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RelayUpstreamEnv, set in the environment of the test binary, makes it
// the stdio upstream of RelayUpstreamForTest (TestMain): "legacy" speaks
// MCP 2025-11-25 at most, "latest" every version of the SDK.
const RelayUpstreamEnv = "GATEWAY_TEST_RELAY_UPSTREAM"

// RelaySampledForTest, when set, is told how each sampling request of
// an in-process RelayUpstreamForTest ended.
var RelaySampledForTest func(error)

// RelayUpstreamForTest is an upstream whose tools ask the client of the
// call: ask samples (the question is the argument q), confirm elicits,
// chat logs q at info and at debug; tick sends progress (q its
// message) just before its result; each first waits until wait calls
// (the argument) have arrived, and answers when wait calls are done, so
// that calls overlap. ask_keyed is ask
// under another name (a same_key_replay contract in the tests). On MCP
// 2025-11-25 and before they send the requests themselves
// (ServerSession.CreateMessage, Elicit); on 2026-07-28 they answer
// input requests (multi round-trip, SEP-2322). legacy keeps the server to
// 2025-11-25.
func RelayUpstreamForTest(legacy bool) *mcp.Server {
	var opts *mcp.ServerOptions
	if legacy {
		opts = &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "relay", Version: "1"}, opts)
	var mu sync.Mutex
	counts := map[string]int{}
	// meet counts one more at what and waits until n have come.
	meet := func(ctx context.Context, what string, n int) error {
		mu.Lock()
		counts[what]++
		mu.Unlock()
		for {
			mu.Lock()
			done := counts[what] >= n
			mu.Unlock()
			if done {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	type in struct {
		Q    string `json:"q"`
		Wait int    `json:"wait"`
		// Stubborn: ask goes on asking when its call is cancelled.
		Stubborn bool `json:"stubborn"`
	}
	tool := func(name string, do func(context.Context, *mcp.CallToolRequest, in) (string, mcp.InputRequest)) {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var a in
				json.Unmarshal(req.Params.Arguments, &a)
				if len(req.Params.InputResponses) == 0 {
					if err := meet(ctx, name+" arrived", a.Wait); err != nil {
						return nil, err
					}
				}
				text, ask := do(ctx, req, a)
				if ask != nil {
					return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"ask": ask}}, nil
				}
				// Every call is answered together: none has ended while
				// another's requests are read.
				if err := meet(ctx, name+" finished", a.Wait); err != nil {
					return nil, err
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
			})
	}
	ask := func(ctx context.Context, req *mcp.CallToolRequest, a in) (string, mcp.InputRequest) {
		params := &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Q}}}}
		var res any
		var err error
		if roundTrips(req) {
			if res = req.Params.InputResponses["ask"]; res == nil {
				return "", params
			}
		} else {
			sctx := ctx
			if a.Stubborn {
				sctx = context.WithoutCancel(ctx)
			}
			res, err = req.Session.CreateMessage(sctx, params)
			if RelaySampledForTest != nil {
				RelaySampledForTest(err)
			}
		}
		if err != nil {
			return "refused: " + err.Error(), nil
		}
		raw, _ := json.Marshal(res)
		var out struct{ Content json.RawMessage }
		json.Unmarshal(raw, &out)
		var text struct{ Text string }
		if json.Unmarshal(out.Content, &text) != nil {
			var texts []struct{ Text string }
			json.Unmarshal(out.Content, &texts)
			if len(texts) > 0 {
				text = texts[0]
			}
		}
		return "sampled: " + text.Text, nil
	}
	tool("ask", ask)
	// flood sends 20 sampling requests at once and counts those the
	// gateway refused for too many waiting, for at most 5 s.
	tool("flood", func(ctx context.Context, req *mcp.CallToolRequest, a in) (string, mcp.InputRequest) {
		if roundTrips(req) {
			return "a multi round-trip asks once", nil
		}
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		refused := make(chan struct{}, 20)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				params := &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "flood"}}}}
				if _, err := req.Session.CreateMessage(fctx, params); err != nil && strings.Contains(err.Error(), "already wait on its client") {
					refused <- struct{}{}
				}
			})
		}
		n, timeout := 0, time.After(5*time.Second)
	count:
		for n < 12 { // while 8 wait, no more can be relayed
			select {
			case <-refused:
				n++
			case <-timeout:
				break count
			}
		}
		cancel()
		wg.Wait()
		return fmt.Sprintf("refused %d", n+len(refused)), nil
	})
	tool("ask_keyed", ask)
	tool("confirm", func(ctx context.Context, req *mcp.CallToolRequest, a in) (string, mcp.InputRequest) {
		params := &mcp.ElicitParams{Message: a.Q,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}
		var res *mcp.ElicitResult
		var err error
		if roundTrips(req) {
			if res, _ = req.Params.InputResponses["ask"].(*mcp.ElicitResult); res == nil {
				return "", params
			}
		} else {
			res, err = req.Session.Elicit(ctx, params)
		}
		if err != nil {
			return "refused: " + err.Error(), nil
		}
		content, _ := json.Marshal(res.Content)
		return "elicited: " + res.Action + " " + string(content), nil
	})
	tool("tick", func(ctx context.Context, req *mcp.CallToolRequest, a in) (string, mcp.InputRequest) {
		req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Total: 1, Message: a.Q})
		return "ticked", nil
	})
	tool("chat", func(ctx context.Context, req *mcp.CallToolRequest, a in) (string, mcp.InputRequest) {
		req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "relay", Data: a.Q,
			Meta: mcp.Meta{"io.idem/call": "forged"}})
		req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Logger: "relay", Data: "debug " + a.Q})
		return "logged", nil
	})
	return s
}

// roundTrips says whether the call's session is on MCP 2026-07-28, where
// a server asks its client by input requests.
func roundTrips(req *mcp.CallToolRequest) bool {
	p := req.Session.InitializeParams()
	return p != nil && p.ProtocolVersion >= "2026-07-28"
}
