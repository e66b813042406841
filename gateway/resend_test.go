package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idem-run/idem/gateway"
)

// TestGatewayCallDroppedAfterReadIsSentOnce (issue 33 item 1): an
// upstream that reads a tools/call and drops the kept-alive connection
// without answering. net/http re-sends a request on a reused connection
// that broke so when it counts the request as safe to repeat (one with an
// Idempotency-Key header, which --upstream-header may set; HTTP/2 after a
// GOAWAY): idem decides every re-send, so the upstream sees the call
// once and the caller is told it may have run.
func TestGatewayCallDroppedAfterReadIsSentOnce(t *testing.T) {
	u := newRawUpstream(t)
	u.call = func(w http.ResponseWriter, _ *http.Request, _ rpc) { hijackClose(w) }
	gw, _ := gatewayOver(t, gateway.UpstreamConfig{URL: u.url, Header: http.Header{"Idempotency-Key": {"set-by-the-operator"}}}, addOverlay)
	status, body := post(t, gw, "add", "drop-1", `{}`)
	if status != http.StatusInternalServerError || !strings.Contains(body, "EXECUTION_FAILED") {
		t.Fatalf("a call dropped after the upstream read it: %d %s", status, body)
	}
	if n := u.calls.Load(); n != 1 {
		t.Fatalf("the upstream read the call %d times, want once", n)
	}
	status, body = post(t, gw, "add", "drop-1", `{}`)
	if status != http.StatusConflict || !strings.Contains(body, "IDEMPOTENCY_RESULT_INDETERMINATE") {
		t.Fatalf("the same key again: %d %s", status, body)
	}
	if n := u.calls.Load(); n != 1 {
		t.Fatalf("the upstream read the call %d times, want once", n)
	}
}

// TestGatewayUpstreamRestartedSessionIsReplaced (issue 33 item 4): an
// upstream restarted between two calls refuses the old Mcp-Session-Id,
// as MCP says (404, here with a JSON-RPC error carrying an id) or as
// some servers do (400). Nothing ran: the gateway opens a new session
// and sends the call there once, and a reload lists the tools again.
func TestGatewayUpstreamRestartedSessionIsReplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse func(http.ResponseWriter, rpc)
	}{
		{"404", nil},
		{"404 with a JSON-RPC error", func(w http.ResponseWriter, req rpc) {
			writeJSON(w, http.StatusNotFound, map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32001, "message": "Session not found"}})
		}},
		{"400", func(w http.ResponseWriter, _ rpc) {
			http.Error(w, "Bad Request: No valid session ID provided", http.StatusBadRequest)
		}},
		{"400 with a JSON-RPC error without an id", func(w http.ResponseWriter, _ rpc) {
			writeJSON(w, http.StatusBadRequest, map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32000, "message": "Bad Request: No valid session ID provided"}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newRawUpstream(t)
			u.refuse = tc.refuse
			gw, up := gatewayOver(t, gateway.UpstreamConfig{URL: u.url}, addOverlay)
			if status, body := post(t, gw, "add", "r-1", `{}`); status != http.StatusOK {
				t.Fatalf("first call: %d %s", status, body)
			}
			u.restart()
			if status, body := post(t, gw, "add", "r-2", `{}`); status != http.StatusOK {
				t.Fatalf("a call after the upstream restarted: %d %s", status, body)
			}
			if n, s := u.calls.Load(), u.sessions.Load(); n != 2 || s != 2 {
				t.Fatalf("the upstream ran %d calls in %d sessions, want 2 in 2", n, s)
			}
			u.restart()
			tools, err := up.Tools(t.Context())
			if err != nil || len(tools) != 2 {
				t.Fatalf("a reload after the upstream restarted: %d tools, %v", len(tools), err)
			}
			if status, body := post(t, gw, "add", "r-2", `{}`); status != http.StatusOK || u.calls.Load() != 2 {
				t.Fatalf("the same key replays: %d %s (calls %d)", status, body, u.calls.Load())
			}
		})
	}
}
