package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
)

type echoIn struct {
	Word string `json:"word" in:"query"`
}

type echoOut struct {
	Word string `json:"word"`
}

func echoOp(name, path string) idem.Operation {
	return idem.Define(idem.Metadata{Name: name, Method: "GET", Path: path, Summary: "Echo", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in echoIn) (echoOut, error) {
			return echoOut{Word: in.Word}, nil
		})
}

var agentToken = map[string]idem.Principal{"tok": {Org: "o", ID: "a", Kind: idem.KindAgent}}

func openStore(t *testing.T) idem.Store {
	t.Helper()
	s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestNewNeedsStoreAndAuth(t *testing.T) {
	if _, err := server.New(t.Context(), server.Config{Auth: httpapi.NewTokens(nil)}); err == nil || !strings.Contains(err.Error(), "Config.Store") {
		t.Fatalf("New without a store = %v", err)
	}
	if _, err := server.New(t.Context(), server.Config{Store: openStore(t)}); err == nil || !strings.Contains(err.Error(), "Config.Auth") {
		t.Fatalf("New without an authenticator = %v", err)
	}
}

// Serve answers until its context ends, then stops everything it started:
// no goroutine of idem's is left once the store is closed too.
func TestServeStopsEverything(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	store := openStore(t)
	srv, err := server.New(t.Context(), server.Config{Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: store, Auth: httpapi.NewTokens(agentToken)})
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
	if code, body := get(t, base+"/v1/echo?word=hi"); code != 200 || !strings.Contains(body, `"word":"hi"`) {
		t.Fatalf("GET /v1/echo = %d %s", code, body)
	}
	if code, _ := get(t, base+"/ui/signin"); code != 200 {
		t.Fatalf("the console at the root: GET /ui/signin = %d, want 200", code)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve after its context ended = %v, want nil", err)
	}
	http.DefaultClient.CloseIdleConnections()
	store.Close()
	goleak.VerifyNone(t, ignore)
}

// Mounted under a prefix, the operations and the API's routes answer under
// it, the OpenAPI document says so, and the console (which links to /ui/)
// is left out.
func TestMountedUnderAPrefix(t *testing.T) {
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), Auth: httpapi.NewTokens(agentToken), BasePath: "/idem",
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/idem/", http.StripPrefix("/idem", srv.Handler()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := server.NewHTTPServer(mux, nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	base := "http://" + ln.Addr().String()
	if code, body := get(t, base+"/idem/v1/echo?word=hi"); code != 200 || !strings.Contains(body, `"word":"hi"`) {
		t.Fatalf("GET /idem/v1/echo = %d %s", code, body)
	}
	if _, body := get(t, base+"/idem/openapi.json"); !strings.Contains(body, `"servers":[{"url":"/idem"`) {
		t.Fatalf("the OpenAPI document does not name the prefix: %.300s", body)
	}
	if code, _ := get(t, base+"/idem/ui/signin"); code != 404 {
		t.Fatalf("GET /idem/ui/signin = %d, want 404 (no console under a prefix)", code)
	}
}

// Reload swaps the operations, the routes and the catalog together; a
// declaration that fails leaves the running one.
func TestReload(t *testing.T) {
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), Auth: httpapi.NewTokens(agentToken),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := server.NewHTTPServer(srv.Handler(), nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	base := "http://" + ln.Addr().String()
	if err := srv.Reload(t.Context(), []idem.Operation{echoOp("echo.get", "/v1/echo"), echoOp("echo.again", "/v1/again")}, nil); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, base+"/v1/again?word=x"); code != 200 {
		t.Fatalf("the reloaded route answers %d", code)
	}
	if _, body := get(t, base+"/v1/operations"); !strings.Contains(body, `"echo.again"`) {
		t.Fatalf("the catalog after the reload lacks echo.again")
	}
	if err := srv.Reload(t.Context(), []idem.Operation{echoOp("bad", "/mcp")}, nil); err == nil {
		t.Fatal("Reload to an operation at /mcp succeeded")
	}
	if code, _ := get(t, base+"/v1/again?word=x"); code != 200 {
		t.Fatalf("after a failed reload the route answers %d", code)
	}
}
