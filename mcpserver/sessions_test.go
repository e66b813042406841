package mcpserver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
)

// TestSessionsAreBounded: one token cannot hold more than its share of
// sessions, nor all tokens together more than the server's bound; beyond
// either, opening one is answered 429 RATE_LIMITED with Retry-After and
// the SDK holds nothing more. A session its client ends, or one idle for
// the timeout, gives its place back (issue 28, item 1: one token opened
// 48,095 sessions in 40 s).
func TestSessionsAreBounded(t *testing.T) {
	srv, err := mcpserver.New(t.Context(), fakeBackend{tool(idem.RetrySameKeyReplay, `{"type":"object"}`)}, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	tokens := httpapi.NewTokens(map[string]idem.Principal{
		"t-a": {Org: "acme", ID: "agent-a", Kind: idem.KindAgent},
		"t-b": {Org: "acme", ID: "agent-b", Kind: idem.KindAgent},
		"t-c": {Org: "other", ID: "agent-c", Kind: idem.KindAgent},
	})
	const idle = 300 * time.Millisecond
	h := mcpserver.Handler(srv, tokens, mcpserver.HTTPOptions{SessionTimeout: idle, MaxSessionsPerPrincipal: 3, MaxSessions: 5})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	open := func(token string) (*mcp.ClientSession, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return client.Connect(t.Context(), &mcp.StreamableClientTransport{
			Endpoint: ts.URL, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}, DisableStandaloneSSE: true,
		}, nil)
	}
	mustOpen := func(token string) *mcp.ClientSession {
		t.Helper()
		cs, err := open(token)
		if err != nil {
			t.Fatalf("open a session as %s: %v", token, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	var a []*mcp.ClientSession
	for range 3 {
		a = append(a, mustOpen("t-a"))
	}
	if _, err := open("t-a"); err == nil || !strings.Contains(err.Error(), "Too Many Requests") {
		t.Fatalf("a fourth session of one token: %v, want 429", err)
	}
	// The refusal is the HTTP API's problem, with Retry-After.
	req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer t-a")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("refusal: %d %v", resp.StatusCode, resp.Header)
	}
	// Another token has its own share, up to the server's bound.
	mustOpen("t-b")
	mustOpen("t-b")
	if _, err := open("t-c"); err == nil || !strings.Contains(err.Error(), "Too Many Requests") {
		t.Fatalf("a sixth session on the server: %v, want 429", err)
	}
	if all, mine := h.Sessions(idem.Principal{Org: "acme", ID: "agent-a"}); all != 5 || mine != 3 {
		t.Fatalf("sessions held %d, of agent-a %d; want 5 and 3", all, mine)
	}
	// A session its client ends (DELETE) gives its place back at once,
	// and the sessions still used keep theirs.
	if err := a[0].Close(); err != nil {
		t.Fatal(err)
	}
	mustOpen("t-c")
	// Idle sessions give theirs back after the timeout.
	time.Sleep(idle + 100*time.Millisecond)
	for range 3 {
		mustOpen("t-a")
	}
	if all, _ := h.Sessions(idem.Principal{}); all > 5 {
		t.Fatalf("%d sessions held, over the bound of 5", all)
	}
}
