package mcpserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
)

func TestNormalizeOrigin(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "https://app.example.com", "https://app.example.com"},
		{"case", "HTTPS://App.Example.COM", "https://app.example.com"},
		{"default https port", "https://app.example.com:443", "https://app.example.com"},
		{"default http port", "http://127.0.0.1:80", "http://127.0.0.1"},
		{"other port", "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"https on 80 keeps it", "https://a.example:80", "https://a.example:80"},
		{"ipv6", "http://[::1]:8080", "http://[::1]:8080"},
		{"trailing slash", "https://app.example.com/", "https://app.example.com"},
		{"null", "null", ""},
		{"no scheme", "app.example.com", ""},
		{"ftp", "ftp://app.example.com", ""},
		{"path", "https://app.example.com/x", ""},
		{"query", "https://app.example.com?x", ""},
		{"user", "https://u@app.example.com", ""},
		{"wildcard", "*", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mcpserver.NormalizeOrigin(tc.in)
			if got != tc.want || (err != nil) != (tc.want == "") {
				t.Fatalf("NormalizeOrigin(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// /mcp refuses a foreign Origin (MCP transport security against DNS
// rebinding) with the FORBIDDEN problem object, before authentication;
// its own origin, an allowed one and no Origin at all pass.
func TestForeignOriginIsForbidden(t *testing.T) {
	srv, err := mcpserver.New(t.Context(), fakeBackend{tool(idem.RetrySameKeyReplay, `{"type":"object"}`)}, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	tokens := httpapi.NewTokens(map[string]idem.Principal{tokenAgent: {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	ts := httptest.NewServer(mcpserver.Handler(srv, tokens, mcpserver.HTTPOptions{AllowedOrigins: []string{"https://app.example.com"}}))
	t.Cleanup(ts.Close)
	own := ts.URL // http://127.0.0.1:PORT
	send := func(method, origin, token string) (int, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"o","version":"1"}}}`)
		}
		req, _ := http.NewRequest(method, ts.URL+"/mcp", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, method, origin, token string
		want                        int
	}{
		{"no origin", "POST", "", tokenAgent, 200},
		{"own origin", "POST", own, tokenAgent, 200},
		{"own origin, other case", "POST", strings.ToUpper(own), tokenAgent, 200},
		{"allowed origin", "POST", "https://app.example.com", tokenAgent, 200},
		{"allowed origin, default port", "POST", "https://app.example.com:443", tokenAgent, 200},
		{"foreign origin", "POST", "http://evil.example", tokenAgent, 403},
		{"own host, other scheme", "POST", strings.Replace(own, "http://", "https://", 1), tokenAgent, 403},
		{"own host, other port", "POST", "http://127.0.0.1:1", tokenAgent, 403},
		{"localhost is another host", "POST", strings.Replace(own, "127.0.0.1", "localhost", 1), tokenAgent, 403},
		{"null origin", "POST", "null", tokenAgent, 403},
		{"foreign origin, no token", "POST", "http://evil.example", "", 403},
		{"foreign origin, event stream", "GET", "http://evil.example", tokenAgent, 403},
		{"foreign origin, session delete", "DELETE", "http://evil.example", tokenAgent, 403},
		{"no origin, no token", "POST", "", "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := send(tc.method, tc.origin, tc.token)
			if status != tc.want {
				t.Fatalf("%s with Origin %q: %d %s, want %d", tc.method, tc.origin, status, body, tc.want)
			}
			if status != 403 {
				return
			}
			var p map[string]any
			if err := json.Unmarshal([]byte(body), &p); err != nil || p["code"] != "FORBIDDEN" || p["status"] != 403.0 {
				t.Fatalf("403 body %s is not the FORBIDDEN problem object", body)
			}
			if d, _ := p["detail"].(string); !strings.Contains(d, tc.origin) || !strings.Contains(d, "--allowed-origins") {
				t.Fatalf("detail %q does not name the Origin and how to allow it", d)
			}
		})
	}
}
