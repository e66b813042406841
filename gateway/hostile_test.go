package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/proxy"
)

// rpc is a JSON-RPC message as the raw upstream reads it.
type rpc struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// rawUpstream is a hand-written streamable HTTP MCP server (2025-11-25,
// JSON answers) whose tools/list, tools/call and GET a test programs: the
// hostile upstreams of issue 33 and issue 38, which no SDK server is.
type rawUpstream struct {
	t   *testing.T
	url string
	srv *httptest.Server

	mu  sync.Mutex
	sid string // the live session; a request naming another is refused
	gen int
	// refuse answers a request naming a session other than sid; 404
	// plain text when nil.
	refuse func(w http.ResponseWriter, req rpc)
	// list answers tools/list; one tool add when nil.
	list func(w http.ResponseWriter, req rpc)
	// call answers tools/call; {"content":[{"type":"text","text":"ok"}]} when nil.
	call func(w http.ResponseWriter, r *http.Request, req rpc)
	// get answers a GET; 405 when nil.
	get func(w http.ResponseWriter, r *http.Request)

	calls    atomic.Int64 // tools/call requests read
	sessions atomic.Int64 // initialize requests answered
}

func newRawUpstream(t *testing.T) *rawUpstream {
	u := &rawUpstream{t: t}
	u.restart()
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	u.url = u.srv.URL + "/mcp"
	return u
}

// restart forgets every session, as a restarted server does.
func (u *rawUpstream) restart() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.gen++
	u.sid = fmt.Sprintf("session-%d", u.gen)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func result(id json.RawMessage, v any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "result": v}
}

func (u *rawUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	sid, refuse, list, call, get := u.sid, u.refuse, u.list, u.call, u.get
	u.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		if get == nil || r.Header.Get("Mcp-Session-Id") != sid {
			http.Error(w, "no stream", http.StatusMethodNotAllowed)
			return
		}
		get(w, r)
		return
	case http.MethodDelete:
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req rpc
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch req.Method {
	case "server/discover":
		writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		return
	case "initialize":
		u.sessions.Add(1)
		w.Header().Set("Mcp-Session-Id", sid)
		writeJSON(w, http.StatusOK, result(req.ID, map[string]any{"protocolVersion": "2025-11-25",
			"capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "raw", "version": "1"}}))
		return
	}
	if r.Header.Get("Mcp-Session-Id") != sid {
		if req.Method == "tools/call" {
			u.t.Logf("tools/call refused for session %q", r.Header.Get("Mcp-Session-Id"))
		}
		if refuse != nil {
			refuse(w, req)
			return
		}
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	switch {
	case req.ID == nil:
		w.WriteHeader(http.StatusAccepted)
	case req.Method == "tools/list" && list != nil:
		list(w, req)
	case req.Method == "tools/list":
		writeJSON(w, http.StatusOK, result(req.ID, map[string]any{"tools": []any{
			map[string]any{"name": "add", "inputSchema": map[string]any{"type": "object"}},
			map[string]any{"name": "total", "inputSchema": map[string]any{"type": "object"}, "annotations": map[string]any{"readOnlyHint": true}}}}))
	case req.Method == "tools/call":
		u.calls.Add(1)
		if call != nil {
			call(w, r, req)
			return
		}
		writeJSON(w, http.StatusOK, result(req.ID, map[string]any{"content": []any{map[string]any{"type": "text", "text": "ok"}}}))
	default:
		writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
	}
}

// gatewayOver serves a gateway in front of cfg's upstream; its URL.
func gatewayOver(t *testing.T, cfg gateway.UpstreamConfig, ov proxy.Overlay) (string, *gateway.Upstream) {
	t.Helper()
	return gatewayOn(t, filepath.Join(t.TempDir(), "idem.db"), cfg, ov)
}

// gatewayOn is gatewayOver with its store in the SQLite file db.
func gatewayOn(t *testing.T, db string, cfg gateway.UpstreamConfig, ov proxy.Overlay) (string, *gateway.Upstream) {
	t.Helper()
	up := dial(t, cfg)
	gw, _ := serveGateway(t, db, build(t, up, ov), nil)
	return gw, up
}

// post calls POST /tools/{name} on the gateway; the status and body.
func post(t *testing.T, gw, name, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", gw+"/tools/"+name, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

var addOverlay = proxy.Overlay{"add": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Replays by key."}}

// hijackClose drops the connection of r after its request was read.
func hijackClose(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
}
