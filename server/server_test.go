package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// Mounted under a prefix, the operations, the API's routes and the console
// answer under it, and the OpenAPI document says so.
func TestMountedUnderAPrefix(t *testing.T) {
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), BasePath: "/idem",
		Auth: httpapi.NewTokens(map[string]idem.Principal{"tok": agentToken["tok"], "browser-tok": {Org: "o", ID: "alice", Kind: idem.KindBrowser}}),
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
	// The console: its links, its sign-in redirect and its cookie carry
	// the prefix, and signing in lands inside it.
	code, page := get(t, base+"/idem/ui/signin?next=/idem/ui/catalog")
	if code != 200 || !strings.Contains(page, `href="/idem/ui/static/`) || strings.Contains(page, `"/ui/`) {
		t.Fatalf("GET /idem/ui/signin = %d; its links do not all carry the prefix:\n%s", code, page)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(base + "/idem/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 303 || !strings.HasPrefix(loc, "/idem/ui/signin?next=%2Fidem%2Fui%2Fapprovals") {
		t.Fatalf("a page without a session redirects %d to %q, want the prefixed sign-in", resp.StatusCode, loc)
	}
	form := strings.NewReader("token=browser-tok&next=%2Fidem%2Fui%2Fcatalog")
	req, _ := http.NewRequest("POST", base+"/idem/ui/signin", form)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err = noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/idem/ui/catalog" || len(cookies) != 1 || cookies[0].Path != "/idem/ui/" {
		t.Fatalf("sign-in under the prefix: %d to %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
}

// Mounted under a prefix, every redirect the console answers carries it:
// the console's root without its slash, a directory of its assets without
// its slash, and the root itself (issue 28).
func TestConsoleRedirectsCarryTheBasePath(t *testing.T) {
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), BasePath: "/idem",
		Auth: httpapi.NewTokens(agentToken),
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
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/idem/ui", "/idem/ui/"},
		{"GET", "/idem/ui?x=1", "/idem/ui/?x=1"},
		{"POST", "/idem/ui", "/idem/ui/"},
		{"GET", "/idem/ui/", "/idem/ui/signin"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || loc != c.want {
			t.Errorf("%s %s = %d to %q, want a redirect to %q", c.method, c.path, resp.StatusCode, loc, c.want)
		}
	}
	// A directory of the assets without its slash is no page: 404, not a
	// redirect out of the prefix.
	resp, err := noRedirect.Get(base + "/idem/ui/static")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 404 {
		t.Errorf("GET /idem/ui/static = %d to %q, want 404", resp.StatusCode, loc)
	}
	// Behind a front that does not clean paths itself (a reverse proxy
	// that strips the prefix), an unclean path is redirected to its clean
	// form under the prefix.
	front := httptest.NewServer(http.StripPrefix("/idem", srv.Handler()))
	t.Cleanup(front.Close)
	for path, want := range map[string]string{
		"/idem/ui//catalog":         "/idem/ui/catalog",
		"/idem/ui/x/../catalog?a=b": "/idem/ui/catalog?a=b",
		"/idem/v1//operations":      "/idem/v1/operations",
		"/idem/v1//attempts/a%2Fb":  "/idem/v1/attempts/a%2Fb",
	} {
		resp, err := noRedirect.Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || loc != want {
			t.Errorf("GET %s = %d to %q, want a redirect to %q", path, resp.StatusCode, loc, want)
		}
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

// gatewayHeader is a transport that sets the header a trusted gateway
// would, and no Authorization.
type gatewayHeader struct{ user string }

func (g gatewayHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Gateway-User", g.user)
	return http.DefaultTransport.RoundTrip(r)
}

// An Authenticator that reads no bearer token at all (a gateway's
// header) serves the HTTP API and MCP alike: the surfaces ask it with the
// whole request.
func TestAuthenticatorWithoutBearerTokens(t *testing.T) {
	gateway := idem.AuthenticatorFunc(func(r *http.Request) (idem.Principal, error) {
		if u := r.Header.Get("X-Gateway-User"); u != "" {
			return idem.Principal{Org: "o", ID: u, Kind: idem.KindServiceAccount}, nil
		}
		return idem.Principal{}, idem.Unrecognized(idem.Errorf(idem.CodeUnauthenticated, "come through the gateway"))
	})
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), Auth: gateway,
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

	via := &http.Client{Transport: gatewayHeader{"svc-1"}}
	resp, err := via.Get(base + "/v1/echo?word=hi")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP through the gateway: %d", resp.StatusCode)
	}
	resp, err = http.Get(base + "/v1/echo?word=hi")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(b), "come through the gateway") {
		t.Fatalf("HTTP around the gateway: %d %s, want 401 with the authenticator's message", resp.StatusCode, b)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	session, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: via}, nil)
	if err != nil {
		t.Fatalf("MCP through the gateway: %v", err)
	}
	defer session.Close()
	res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo.get", Arguments: map[string]any{"word": "hi"}})
	if err != nil || res.IsError {
		t.Fatalf("MCP tools/call through the gateway: %v %+v", err, res)
	}
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp"}, nil); err == nil {
		t.Fatal("MCP around the gateway connected")
	}
}

// readSignal is a request body that records whether it was read.
type readSignal struct {
	r    io.Reader
	read atomic.Bool
}

func (b *readSignal) Read(p []byte) (int, error) { b.read.Store(true); return b.r.Read(p) }
func (b *readSignal) Close() error               { return nil }

// TestMCPReadsNoBodyBeforeTheCallerIsKnown: /mcp reads a request's body
// (to move a params key into _meta, SPEC §17) only for a caller it has
// authenticated; a caller it refuses costs no read of what it sent.
func TestMCPReadsNoBodyBeforeTheCallerIsKnown(t *testing.T) {
	srv, err := server.New(t.Context(), server.Config{Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t), Auth: httpapi.NewTokens(agentToken)})
	if err != nil {
		t.Fatal(err)
	}
	body := &readSignal{r: strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo.get","idempotencyKey":"k"}}`)}
	req := httptest.NewRequest("POST", "/mcp", body)
	req.Header.Set("Authorization", "Bearer wrong")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 401 || body.read.Load() {
		t.Fatalf("unauthenticated: %d, body read %v", rec.Code, body.read.Load())
	}
}
