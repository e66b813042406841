// Command gwpolling is a streamable-HTTP MCP server (2025-11-25) that
// answers every tools/call as an upstream using SSE polling does (SEP-1699):
// the call's stream carries a priming event (an id and a retry field) and
// closes while the call "runs"; the first resumption with Last-Event-ID
// ends empty (nothing yet), and the second carries the result. It is the
// upstream of idem gateway's issue 38 test (e2e/gateway_resume_test.go).
// Its tools: add (adds n to a counter, an effect) and total (reads it).
// It prints "listening on URL" to stderr.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
)

type rpc struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

type upstream struct {
	mu      sync.Mutex
	total   int
	answers map[string]string // the priming event's id → the result's event
	polls   map[string]int
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		u.resume(w, r)
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
	switch {
	case req.Method == "initialize":
		w.Header().Set("Mcp-Session-Id", "polling-session")
		writeJSON(w, map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{"protocolVersion": "2025-11-25",
			"capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "gwpolling", "version": "1"}}})
	case req.ID == nil:
		w.WriteHeader(http.StatusAccepted)
	case req.Method == "tools/list":
		obj := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}
		writeJSON(w, map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{"tools": []any{
			map[string]any{"name": "add", "description": "Add n to the counter.", "inputSchema": obj},
			map[string]any{"name": "total", "description": "Read the counter.", "inputSchema": map[string]any{"type": "object"},
				"annotations": map[string]any{"readOnlyHint": true}},
		}}})
	case req.Method == "tools/call":
		u.call(w, req)
	default:
		writeJSON(w, map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
	}
}

// call runs the tool at once and keeps its answer for the second
// resumption of the call's stream, which it closes after the priming
// event.
func (u *upstream) call(w http.ResponseWriter, req rpc) {
	var p struct {
		Name      string
		Arguments struct{ N int }
	}
	json.Unmarshal(req.Params, &p)
	u.mu.Lock()
	if p.Name == "add" {
		u.total += p.Arguments.N
	}
	text := fmt.Sprintf("%s: total %d", p.Name, u.total)
	eid := fmt.Sprintf("call-%d-%s-0", len(u.answers), req.ID)
	res, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
		"content": []any{map[string]any{"type": "text", "text": text}}, "structuredContent": map[string]any{"total": u.total}}})
	u.answers[eid] = fmt.Sprintf("id: %s-1\ndata: %s\n\n", eid, res)
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "id: %s\nretry: 50\ndata:\n\n", eid)
	fmt.Fprintf(os.Stderr, "tools/call %s: stream closed after %s\n", p.Name, eid)
}

// resume answers a GET with Last-Event-ID: empty the first time, the
// result the second.
func (u *upstream) resume(w http.ResponseWriter, r *http.Request) {
	last := r.Header.Get("Last-Event-ID")
	u.mu.Lock()
	answer, ok := u.answers[last]
	u.polls[last]++
	n := u.polls[last]
	u.mu.Unlock()
	if !ok {
		http.Error(w, "no stream to resume", http.StatusMethodNotAllowed)
		return
	}
	fmt.Fprintf(os.Stderr, "GET Last-Event-ID %s (poll %d)\n", last, n)
	w.Header().Set("Content-Type", "text/event-stream")
	if n < 2 {
		w.WriteHeader(http.StatusOK) // nothing yet
		return
	}
	io.WriteString(w, answer)
}

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())
	log.Fatal(http.Serve(ln, &upstream{answers: map[string]string{}, polls: map[string]int{}}))
}
