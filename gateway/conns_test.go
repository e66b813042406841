package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/gateway"
)

// countingUpstream is a go-sdk MCP server over streamable HTTP (answers
// on SSE streams, the SDK's default) that counts the TCP connections it
// accepted. Each POST's stream ends 2 ms after the server is done with
// it, as over a network where the stream's end comes in a packet after
// the answer's: a client that stops reading at the answer then always
// leaves the end unread.
func countingUpstream(t *testing.T) (url string, accepted *atomic.Int64) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "counted", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "get", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "item"}}}, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if r.Method == http.MethodPost {
				time.Sleep(2 * time.Millisecond)
			}
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				accepted.Add(1)
			}
		},
	}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp", accepted
}

// Issue 34 findings 1 and 2 (f-gwperf): the gateway keeps its
// connections to the upstream. Sequential calls reuse one: each call's
// SSE answer is read to the stream's end before the call's context ends
// (a stream cut after its answer closes its connection, one dial per
// call). Rounds of concurrent calls reuse the first round's: the pool
// keeps more than http.DefaultTransport's 2 idle connections per host.
func TestGatewayKeepsUpstreamConnections(t *testing.T) {
	url, accepted := countingUpstream(t)
	ctx := t.Context()
	up, err := gateway.Dial(ctx, gateway.UpstreamConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	call := func() {
		res, err := up.Call(ctx, &mcp.CallToolParams{Name: "get", Arguments: json.RawMessage(`{}`)})
		if err != nil || res.IsError {
			t.Errorf("call: %v %+v", err, res)
		}
	}
	call() // the session's own streams are open from here on

	const sequential = 30
	before := accepted.Load()
	for range sequential {
		call()
	}
	if n := accepted.Load() - before; n > 2 {
		t.Errorf("%d sequential calls opened %d connections to the upstream, want at most 2", sequential, n)
	}

	const clients, rounds = 8, 5
	before = accepted.Load()
	for range rounds {
		var wg sync.WaitGroup
		for range clients {
			wg.Go(call)
		}
		wg.Wait()
	}
	if n := accepted.Load() - before; n > clients+clients/2 {
		t.Errorf("%d rounds of %d concurrent calls opened %d connections to the upstream, want at most %d (one per client, and a few)", rounds, clients, n, clients+clients/2)
	}
}

// An upstream that keeps a call's stream open after the answer (MCP: it
// SHOULD close it) still answers the call at once, and the gateway ends
// that stream within a bound (streamTailWait): neither the call nor the
// connection waits on the upstream.
func TestGatewayEndsAStreamKeptOpenAfterTheAnswer(t *testing.T) {
	u := newRawUpstream(t)
	ended := make(chan struct{})
	u.mu.Lock()
	u.call = func(w http.ResponseWriter, r *http.Request, req rpc) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"kept\"}]}}\n\n", req.ID)
		w.(http.Flusher).Flush()
		for {
			// Events after the answer, then nothing, until the gateway
			// ends the exchange.
			select {
			case <-r.Context().Done():
				close(ended)
				return
			default:
			}
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				close(ended)
				return
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}
	u.mu.Unlock()
	up, err := gateway.Dial(t.Context(), gateway.UpstreamConfig{URL: u.url})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	res, err := up.Call(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: json.RawMessage(`{}`)})
	if err != nil || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "kept" {
		t.Fatalf("call: %v %+v", err, res)
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway never ended the call's stream the upstream kept open")
	}
}
