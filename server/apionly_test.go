package server_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/server"
)

// An API-only server (no MCP, no metrics, no console) serves the
// operations and the service's own routes from one handler, under one
// lifecycle (Serve), and nothing else.
func TestAPIOnlyWithOwnRoutes(t *testing.T) {
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), Auth: httpapi.NewTokens(agentToken),
		NoMCP: true, NoMetrics: true, NoConsole: true,
		Handlers: map[string]http.Handler{
			"GET /status": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	for path, want := range map[string]int{"/v1/echo?word=hi": 200, "/status": 200, "/v1/operations": 200, "/mcp": 404, "/metrics": 404, "/ui/": 404} {
		if code, body := get(t, base+path); code != want {
			t.Errorf("GET %s = %d %s, want %d", path, code, body, want)
		}
	}
	if _, body := get(t, base+"/status"); body != "ok" {
		t.Errorf("GET /status = %q, want the service's own handler's ok", body)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// A route of the service's that would take a request meant for idem's
// routes or an operation's is refused by New, naming both.
func TestHandlersThatShadowAreRefused(t *testing.T) {
	ok := http.NotFoundHandler()
	for pattern, want := range map[string]string{
		"GET /v1/echo":     "operation echo.get",
		"/v1/{anything}":   "idem's own route /v1/operations",
		"POST /mcp":        "idem's own route /mcp",
		"GET /metrics":     "idem's own route /metrics",
		"/v1/operations":   "idem's own route /v1/operations",
		"/":                "idem's own route",
		"BAD PATTERN here": `pattern "BAD PATTERN here"`,
	} {
		_, err := server.New(t.Context(), server.Config{
			Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), Auth: httpapi.NewTokens(agentToken),
			Handlers: map[string]http.Handler{pattern: ok},
		})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Config.Handlers") {
			t.Errorf("Handlers %q: %v; want a refusal naming %s", pattern, err, want)
		}
	}
}

// A Reload that adds an operation a route of the service's would take is
// refused as New refuses it, and the running declaration stays.
func TestReloadRefusesAnOperationTheHandlersShadow(t *testing.T) {
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), Auth: httpapi.NewTokens(agentToken),
		NoMCP: true, NoMetrics: true, NoConsole: true,
		Handlers: map[string]http.Handler{
			"GET /status": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Reload(t.Context(), []idem.Operation{echoOp("echo.get", "/v1/echo"), echoOp("status.get", "/status")}, nil)
	if err == nil || !strings.Contains(err.Error(), "Config.Handlers") || !strings.Contains(err.Error(), "operation status.get") {
		t.Fatalf("Reload adding GET /status beside the handler's GET /status: %v; want a refusal naming both", err)
	}
	front := httptest.NewServer(srv.Handler())
	defer front.Close()
	if _, body := get(t, front.URL+"/v1/operations"); strings.Contains(body, "status.get") || !strings.Contains(body, "echo.get") {
		t.Fatalf("the catalog after the refused reload: %s; want echo.get alone", body)
	}
	if _, body := get(t, front.URL+"/status"); body != "ok" {
		t.Fatalf("GET /status after the refused reload = %q, want the handler's ok", body)
	}
}
