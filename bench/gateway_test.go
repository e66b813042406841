package main

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// The gateway mode's upstream and clients, in process: the go-sdk clients
// find both tools, a read answers its id, each write a new id, an error
// result is an error, and the upstream counts the connections it accepted
// (the harness's clients keep theirs: fewer connections than calls).
func TestMCPUpstreamServesTheToolsAndCountsConnections(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil)
	counted := &countingListener{Listener: ts.Listener}
	ts.Listener = counted
	ts.Config.Handler = mcpUpstream(&counted.accepted)
	ts.Start()
	defer ts.Close()
	ctx := t.Context()
	hc := newClient(2)
	defer hc.CloseIdleConnections()
	sessions, err := connectAll(ctx, hc, ts.URL+"/mcp", 2)
	defer closeAll(sessions)
	if err != nil {
		t.Fatal(err)
	}
	read, write, err := servedNames(ctx, sessions[0])
	if err != nil || read != readTool || write != writeTool {
		t.Fatalf("served names %q, %q, %v; want %q, %q", read, write, err, readTool, writeTool)
	}
	const calls = 40
	ids := map[string]bool{}
	for i := range calls / 2 {
		text, err := callTool(ctx, sessions[i%2], readTool, "id", "x", "")
		if err != nil || text != `{"id":"x","name":"bench"}` {
			t.Fatalf("get_item answered %q, %v", text, err)
		}
		text, err = callTool(ctx, sessions[i%2], writeTool, "name", "n", "key-1")
		if err != nil || !strings.HasPrefix(text, `{"id":"it_`) {
			t.Fatalf("create_item answered %q, %v", text, err)
		}
		ids[text] = true
	}
	if len(ids) != calls/2 {
		t.Errorf("%d writes answered %d distinct results, want each its own id", calls/2, len(ids))
	}
	if _, err := callTool(ctx, sessions[0], writeTool, "name", "", ""); err == nil {
		t.Error("create_item without a name: no error, want the error result as an error")
	}
	n := upstreamConnections(ctx, hc, ts.URL)
	if n < 1 || n >= calls/2 {
		t.Errorf("the upstream counted %d connections for %d calls on 2 sessions, want at least 1 and fewer than %d", n, calls, calls/2)
	}
}
