package server_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/jwtauth"
	"github.com/idem-run/idem/server"
)

const testIssuer = "https://login.example.com/"

// jwtAuthenticator is a jwtauth.Authenticator over a key set served by
// an httptest server (no token of it is needed here: only its issuer).
func jwtAuthenticator(t *testing.T) *jwtauth.Authenticator {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Use: "sig"}}})
	}))
	t.Cleanup(jwks.Close)
	a, err := jwtauth.New(t.Context(), jwtauth.Config{JWKSURL: jwks.URL, Issuer: testIssuer, Audience: "https://idem.example.com", HTTPClient: jwks.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// forbiddenOp answers 403 FORBIDDEN: the caller lacks a role.
func forbiddenOp() idem.Operation {
	return idem.Define(idem.Metadata{Name: "admin.show", Method: "GET", Path: "/v1/admin", Summary: "Approvers only", SideEffect: idem.SideEffectRead,
		Errors: []idem.DeclaredError{idem.Declare(idem.CodeForbidden, "Only approvers may look.")}},
		func(ctx context.Context, call *idem.Call, _ struct{}) (echoOut, error) {
			return echoOut{}, idem.Errorf(idem.CodeForbidden, "admin.show needs the %s role", idem.RoleApprover)
		})
}

// serveWith serves a server of cfg (operations echo.get and admin.show
// added, a new store) with httptest and returns its URL.
func serveWith(t *testing.T, cfg server.Config) string {
	t.Helper()
	cfg.Operations = append(cfg.Operations, echoOp("echo.get", "/v1/echo"), forbiddenOp())
	cfg.Store = openStore(t)
	srv, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

type answer struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, token string, header ...string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// unauthenticatedBody is the 401 problem of a request without a token,
// the same with or without JWTs.
const unauthenticatedBody = `{"type":"urn:idem:error:UNAUTHENTICATED","title":"Unauthenticated","status":401,"detail":"send a token as Authorization: Bearer \u003ctoken\u003e","code":"UNAUTHENTICATED","retryable":false}`

// TestProtectedResourceMetadata (issue 26, item 6): with JWTs accepted,
// the server is an OAuth 2.0 protected resource (RFC 9728): it serves the
// metadata of the HTTP API at /.well-known/oauth-protected-resource and of
// MCP at /.well-known/oauth-protected-resource/mcp, naming the JWT issuer
// as the authorization server, and every 401 names the metadata in its
// challenge (resource_metadata), its problem body unchanged. The origin is
// the public URL when one is configured, whatever the Host header says;
// without one, the request's own only for a loopback host.
func TestProtectedResourceMetadata(t *testing.T) {
	auth := idem.Authenticators{httpapi.NewTokens(agentToken), jwtAuthenticator(t)}

	t.Run("public URL", func(t *testing.T) {
		url := serveWith(t, server.Config{Auth: auth, PublicURL: "https://idem.example.com"})
		for _, c := range []struct{ path, resource string }{
			{"/.well-known/oauth-protected-resource", "https://idem.example.com"},
			{"/.well-known/oauth-protected-resource/mcp", "https://idem.example.com/mcp"},
		} {
			a := call(t, "GET", url+c.path, "", "Host", "evil.example")
			want := `{"resource":"` + c.resource + `","authorization_servers":["https://login.example.com/"],"bearer_methods_supported":["header"],"resource_name":"idem"}`
			if a.status != 200 || a.body != want || a.header.Get("Content-Type") != "application/json" || a.header.Get("Access-Control-Allow-Origin") != "*" {
				t.Fatalf("GET %s: %d %v %s; want 200 %s", c.path, a.status, a.header, a.body, want)
			}
		}
		for _, c := range []struct{ method, path, token, challenge string }{
			{"GET", "/v1/echo?word=x", "", `Bearer realm="idem", resource_metadata="https://idem.example.com/.well-known/oauth-protected-resource"`},
			{"GET", "/v1/echo?word=x", "not-a-token", `Bearer realm="idem", error="invalid_token", resource_metadata="https://idem.example.com/.well-known/oauth-protected-resource"`},
			{"GET", "/v1/executions/exe_x", "", `Bearer realm="idem", resource_metadata="https://idem.example.com/.well-known/oauth-protected-resource"`},
			{"POST", "/mcp", "", `Bearer realm="idem", resource_metadata="https://idem.example.com/.well-known/oauth-protected-resource/mcp"`},
		} {
			a := call(t, c.method, url+c.path, c.token, "Host", "evil.example")
			if a.status != 401 || a.header.Get("WWW-Authenticate") != c.challenge {
				t.Fatalf("%s %s: %d WWW-Authenticate %q; want 401 %q", c.method, c.path, a.status, a.header.Get("WWW-Authenticate"), c.challenge)
			}
			if c.token == "" && a.body != unauthenticatedBody {
				t.Fatalf("%s %s: the problem changed: %s", c.method, c.path, a.body)
			}
		}
	})

	// Mounted under /idem, as docs/embedding.md does it, with the root
	// documents of ProtectedResourceMetadata beside it.
	t.Run("base path", func(t *testing.T) {
		srv, err := server.New(t.Context(), server.Config{Operations: []idem.Operation{echoOp("echo.get", "/v1/echo")}, Store: openStore(t),
			Auth: auth, PublicURL: "https://example.com/", BasePath: "/idem"})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/idem/", http.StripPrefix("/idem", srv.Handler()))
		mux.Handle(httpapi.WellKnownProtectedResource+"/", srv.ProtectedResourceMetadata())
		hs := httptest.NewServer(mux)
		t.Cleanup(hs.Close)
		for _, c := range []struct{ path, resource string }{
			{"/idem/.well-known/oauth-protected-resource/mcp", "https://example.com/idem/mcp"},
			{"/idem/.well-known/oauth-protected-resource", "https://example.com/idem"},
			{"/.well-known/oauth-protected-resource/idem/mcp", "https://example.com/idem/mcp"},
			{"/.well-known/oauth-protected-resource/idem", "https://example.com/idem"},
		} {
			if a := call(t, "GET", hs.URL+c.path, ""); a.status != 200 || !strings.Contains(a.body, `"resource":"`+c.resource+`"`) {
				t.Fatalf("GET %s: %d %s; want the resource %s", c.path, a.status, a.body, c.resource)
			}
		}
		if a := call(t, "GET", hs.URL+"/.well-known/oauth-protected-resource/other", ""); a.status != 404 {
			t.Fatalf("another resource's metadata: %d %s", a.status, a.body)
		}
		for path, want := range map[string]string{
			"/idem/mcp":             `Bearer realm="idem", resource_metadata="https://example.com/idem/.well-known/oauth-protected-resource/mcp"`,
			"/idem/v1/echo?word=hi": `Bearer realm="idem", resource_metadata="https://example.com/idem/.well-known/oauth-protected-resource"`,
		} {
			method := "GET"
			if strings.HasSuffix(path, "/mcp") {
				method = "POST"
			}
			if a := call(t, method, hs.URL+path, ""); a.status != 401 || a.header.Get("WWW-Authenticate") != want {
				t.Fatalf("POST %s: %d WWW-Authenticate %q; want %q", path, a.status, a.header.Get("WWW-Authenticate"), want)
			}
		}
	})

	t.Run("no public URL", func(t *testing.T) {
		url := serveWith(t, server.Config{Auth: auth})
		host := strings.TrimPrefix(url, "http://") // 127.0.0.1:port, a loopback host
		a := call(t, "GET", url+"/.well-known/oauth-protected-resource/mcp", "")
		if a.status != 200 || !strings.Contains(a.body, `"resource":"http://`+host+`/mcp"`) || a.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("loopback: %d %v %s", a.status, a.header, a.body)
		}
		a = call(t, "GET", url+"/.well-known/oauth-protected-resource/mcp", "", "Host", "localhost:9")
		if !strings.Contains(a.body, `"resource":"http://localhost:9/mcp"`) {
			t.Fatalf("localhost: %d %s", a.status, a.body)
		}
		// Any other Host header could be anything a client wrote: no
		// metadata, no resource_metadata.
		a = call(t, "GET", url+"/.well-known/oauth-protected-resource/mcp", "", "Host", "idem.example.com")
		if a.status != 404 || !strings.Contains(a.body, `"code":"NOT_FOUND"`) || !strings.Contains(a.body, "--public-url") {
			t.Fatalf("another host: %d %s", a.status, a.body)
		}
		a = call(t, "POST", url+"/mcp", "", "Host", "idem.example.com")
		if a.status != 401 || a.header.Get("WWW-Authenticate") != `Bearer realm="idem"` {
			t.Fatalf("another host: %d %q", a.status, a.header.Get("WWW-Authenticate"))
		}
	})

	// With the tokens file alone there is no authorization server to name:
	// no metadata (404, as any unknown route), no resource_metadata.
	t.Run("tokens file only", func(t *testing.T) {
		url := serveWith(t, server.Config{Auth: httpapi.NewTokens(agentToken), PublicURL: "https://idem.example.com"})
		for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
			if a := call(t, "GET", url+path, ""); a.status != 404 || !strings.Contains(a.body, `"code":"NOT_FOUND"`) {
				t.Fatalf("GET %s: %d %s", path, a.status, a.body)
			}
		}
		for _, path := range []string{"/v1/echo?word=x", "/mcp"} {
			a := call(t, "POST", url+path, "")
			if path == "/v1/echo?word=x" {
				a = call(t, "GET", url+path, "")
			}
			if a.status != 401 || a.header.Get("WWW-Authenticate") != `Bearer realm="idem"` || a.body != unauthenticatedBody {
				t.Fatalf("%s: %d %q %s", path, a.status, a.header.Get("WWW-Authenticate"), a.body)
			}
		}
	})
}

// TestInsufficientScope (issue 26, item 6): a 403 FORBIDDEN, a role the
// caller lacks, carries the bearer challenge insufficient_scope (RFC 6750
// §3.1), its problem body unchanged; other 403s (a foreign Origin on /mcp)
// do not.
func TestInsufficientScope(t *testing.T) {
	url := serveWith(t, server.Config{Auth: httpapi.NewTokens(agentToken)})
	a := call(t, "GET", url+"/v1/admin", "tok")
	if a.status != 403 || a.header.Get("WWW-Authenticate") != `Bearer realm="idem", error="insufficient_scope"` ||
		!strings.Contains(a.body, `"code":"FORBIDDEN"`) || !strings.Contains(a.body, `"detail":"admin.show needs the approver role"`) {
		t.Fatalf("%d %q %s", a.status, a.header.Get("WWW-Authenticate"), a.body)
	}
	a = call(t, "POST", url+"/mcp", "tok", "Origin", "https://evil.example")
	if a.status != 403 || a.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("foreign Origin: %d %q %s", a.status, a.header.Get("WWW-Authenticate"), a.body)
	}
}

// recordingOAuth is an MCP client's OAuth handler that does what the
// SDK's own does first (auth.AuthorizationCodeHandler): read the 401's
// challenge and fetch the protected resource metadata it names, checked
// as RFC 9728 §3.3 says (its resource must be the MCP server's URL). It
// then gives up, since there is no authorization server to talk to here.
type recordingOAuth struct {
	serverURL string
	challenge string
	prm       *oauthex.ProtectedResourceMetadata
	err       error
}

func (h *recordingOAuth) TokenSource(context.Context) (oauth2.TokenSource, error) { return nil, nil }

func (h *recordingOAuth) Authorize(ctx context.Context, _ *http.Request, resp *http.Response) error {
	defer resp.Body.Close()
	h.challenge = resp.Header.Get("WWW-Authenticate")
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		h.err = err
		return err
	}
	for _, c := range cs {
		if u := c.Params["resource_metadata"]; u != "" {
			h.prm, h.err = oauthex.GetProtectedResourceMetadata(ctx, u, h.serverURL, http.DefaultClient)
		}
	}
	return io.EOF // no token: the connection fails
}

// TestMCPClientDiscoversTheAuthorizationServer: the official SDK's
// client, connecting to /mcp without a token, is answered 401 with a
// challenge from which it finds the metadata of /mcp and, in it, the JWT
// issuer.
func TestMCPClientDiscoversTheAuthorizationServer(t *testing.T) {
	url := serveWith(t, server.Config{Auth: idem.Authenticators{httpapi.NewTokens(agentToken), jwtAuthenticator(t)}})
	oauth := &recordingOAuth{serverURL: url + "/mcp"}
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	_, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp", OAuthHandler: oauth}, nil)
	if err == nil {
		t.Fatal("connected without a token")
	}
	t.Logf("WWW-Authenticate: %s", oauth.challenge)
	if oauth.err != nil || oauth.prm == nil {
		t.Fatalf("challenge %q: metadata %+v, %v", oauth.challenge, oauth.prm, oauth.err)
	}
	if oauth.prm.Resource != url+"/mcp" || len(oauth.prm.AuthorizationServers) != 1 || oauth.prm.AuthorizationServers[0] != testIssuer {
		t.Fatalf("metadata %+v", oauth.prm)
	}
}
