package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/gateway"
)

// pollingCall makes u answer tools/call as an upstream using SSE polling
// does (MCP 2025-11-25, SEP-1699): the call's stream opens with an event
// id and a retry field and closes before the result, which comes on the
// stream the client resumes with Last-Event-ID. resumed counts those GETs.
//
// empty is how many resumed streams close with no event before one
// carries the result (a long poll that found nothing yet).
func pollingCall(u *rawUpstream, resumed *atomic.Int64, empty int) {
	var mu sync.Mutex
	pending := map[string]string{} // event id → the result's id
	polls := map[string]int{}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.call = func(w http.ResponseWriter, _ *http.Request, req rpc) {
		mu.Lock()
		eid := fmt.Sprintf("call-%s-0", req.ID)
		pending[eid] = string(req.ID)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: %s\nretry: 10\ndata:\n\n", eid)
		// The handler returns: the stream closes mid-call.
	}
	u.get = func(w http.ResponseWriter, r *http.Request) {
		last := r.Header.Get("Last-Event-ID")
		mu.Lock()
		id, ok := pending[last]
		polls[last]++
		n := polls[last]
		mu.Unlock()
		if !ok {
			http.Error(w, "no such stream", http.StatusMethodNotAllowed)
			return
		}
		resumed.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		if n <= empty {
			w.WriteHeader(http.StatusOK) // nothing yet: the poll ends empty
			return
		}
		fmt.Fprintf(w, "id: call-%s-1\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"resumed\"}]}}\n\n", id, id)
	}
}

// TestGatewayResultOnAResumedStream (issue 38): the result an upstream
// delivers on the stream the gateway's client resumed completes the call
// and is stored: the caller gets it, and a same-key retry replays it.
func TestGatewayResultOnAResumedStream(t *testing.T) {
	for _, empty := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("empty polls %d", empty), func(t *testing.T) {
			u := newRawUpstream(t)
			var resumed atomic.Int64
			pollingCall(u, &resumed, empty)
			gw, _ := gatewayOver(t, gateway.UpstreamConfig{URL: u.url}, addOverlay)
			status, body := post(t, gw, "add", "poll-1", `{}`)
			if status != http.StatusOK || !strings.Contains(body, "resumed") {
				t.Fatalf("a call answered on a resumed stream: %d %s (resumed %d)", status, body, resumed.Load())
			}
			if n := resumed.Load(); n != int64(empty+1) {
				t.Fatalf("the stream was resumed %d times, want %d", n, empty+1)
			}
			resumed.Store(0)
			again, replay := post(t, gw, "add", "poll-1", `{}`)
			if again != http.StatusOK || replay != body || u.calls.Load() != 1 {
				t.Fatalf("the same key again: %d %s, first %s, calls %d", again, replay, body, u.calls.Load())
			}
			// Unkeyed over HTTP (a read), then keyed and unkeyed over MCP.
			if status, body := post(t, gw, "total", "", `{}`); status != http.StatusOK || !strings.Contains(body, "resumed") {
				t.Fatalf("an unkeyed call: %d %s", status, body)
			}
			cs := mcpClient(t, gw)
			_, first := call(t, cs, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"idempotencyKey": "poll-2"}})
			replayed, second := call(t, cs, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"idempotencyKey": "poll-2"}})
			// The replay is the first answer, its _meta saying so.
			if !strings.Contains(first, "resumed") || replayed.Meta["io.idem/replayed"] != true ||
				strings.Replace(second, `"io.idem/replayed":true`, `"io.idem/replayed":false`, 1) != first {
				t.Fatalf("over MCP: %s, then %s", first, second)
			}
			if res, raw := call(t, cs, &mcp.CallToolParams{Name: "total", Arguments: map[string]any{}}); res.IsError || !strings.Contains(raw, "resumed") {
				t.Fatalf("an unkeyed call over MCP: %s", raw)
			}
			if n := u.calls.Load(); n != 4 {
				t.Fatalf("the upstream ran %d calls, want 4", n)
			}
		})
	}
}

// mcpClient is an SDK client session on the gateway's /mcp.
func mcpClient(t *testing.T, gw string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: gw + "/mcp", HTTPClient: &http.Client{Transport: bearer{}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
