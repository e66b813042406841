package mcpserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
)

// HTTPOptions configure Handler.
type HTTPOptions struct {
	// SessionTimeout closes a session idle for that long
	// (DefaultSessionTimeout when 0).
	SessionTimeout time.Duration
	// MaxSessionsPerPrincipal and MaxSessions bound the sessions held for
	// one principal and in all (DefaultMaxSessionsPerPrincipal and
	// DefaultMaxSessions when 0): a request that would open one more is
	// answered 429 RATE_LIMITED.
	MaxSessionsPerPrincipal int
	MaxSessions             int
	// MaxBodyBytes limits a request body (the HTTP API's limit plus room
	// for the JSON-RPC framing when 0).
	MaxBodyBytes int64
	// Logger receives the SDK's logs; none when nil.
	Logger *slog.Logger
	// AllowedOrigins are the origins (NormalizeOrigin) besides the
	// server's own whose browser pages may call /mcp.
	AllowedOrigins []string
	// Challenge is the WWW-Authenticate value of a 401 answered to a
	// request (with resource_metadata when the server publishes protected
	// resource metadata); httpapi.Challenge when nil.
	Challenge func(*http.Request) string
}

// HTTPHandler serves streamable HTTP MCP (at /mcp of idem serve) behind
// the HTTP API's bearer-token auth.
type HTTPHandler struct {
	authn   idem.Authenticator
	next    http.Handler
	origins map[string]bool // AllowedOrigins, normalized
	book    *sessionBook
	maxBody int64

	// challenge is the WWW-Authenticate value of a 401 (HTTPOptions.Challenge).
	challenge func(*http.Request) string

	// draining ends when the server drains (Drain).
	draining context.Context
	drain    context.CancelFunc
}

// caller is what the auth layer tells a tool handler about its request:
// the principal and the request's context, which ends when the client
// drops the response stream.
type caller struct {
	principal idem.Principal
	stream    context.Context
}

// callerExtra is the TokenInfo.Extra key of the caller.
const callerExtra = "idem.caller"

// callerKey is the request-context key of the caller.
type callerKey struct{}

// authenticatedStandIn is the bearer token the SDK's middleware sees once
// authn has accepted a request.
const authenticatedStandIn = "idem-authenticated"

// tokenLifetime stands in for the expiry the SDK wants on a token: idem
// tokens do not expire, and every request is authenticated anew.
const tokenLifetime = 24 * time.Hour

// Handler returns the streamable HTTP handler of srv. A request whose
// Origin header is neither absent, nor the server's own origin, nor one of
// opts.AllowedOrigins is refused first (403 FORBIDDEN), as the MCP
// transport requires against DNS rebinding. Every other request needs
// authn to accept it (else 401 with the UNAUTHENTICATED
// problem object, as on the HTTP API); a session stays with the principal
// that opened it. Tool handlers get the principal in their context
// (PrincipalFrom) and, for unkeyed calls, are cancelled when the client
// drops the request's stream.
func Handler(srv *mcp.Server, authn idem.Authenticator, opts HTTPOptions) *HTTPHandler {
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = DefaultSessionTimeout
	}
	if opts.MaxSessionsPerPrincipal == 0 {
		opts.MaxSessionsPerPrincipal = DefaultMaxSessionsPerPrincipal
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = httpapi.DefaultMaxBodyBytes + 64<<10
	}
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout: opts.SessionTimeout, MaxRequestBodyBytes: opts.MaxBodyBytes, Logger: opts.Logger,
	})
	// The SDK hands a request's TokenInfo to the tool handlers of the
	// messages it carries, and pins a session to TokenInfo.UserID. The
	// principal is already authenticated when this verifier runs.
	verify := func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c, ok := r.Context().Value(callerKey{}).(*caller)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{
			UserID:     sessionOwner(c.principal),
			Expiration: time.Now().Add(tokenLifetime),
			Extra:      map[string]any{callerExtra: c},
		}, nil
	}
	origins := map[string]bool{}
	for _, o := range opts.AllowedOrigins {
		n, err := NormalizeOrigin(o)
		if err != nil {
			panic("mcpserver: " + err.Error())
		}
		origins[n] = true
	}
	draining, drain := context.WithCancel(context.Background())
	if opts.Challenge == nil {
		opts.Challenge = httpapi.Challenge
	}
	return &HTTPHandler{authn: authn, challenge: opts.Challenge, next: auth.RequireBearerToken(verify, nil)(sdk), origins: origins, draining: draining, drain: drain,
		book: newSessionBook(opts.SessionTimeout, opts.MaxSessionsPerPrincipal, opts.MaxSessions), maxBody: opts.MaxBodyBytes}
}

// ServeHTTP implements http.Handler.
func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.checkOrigin(r); err != nil {
		writeProblem(w, err)
		return
	}
	p, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	done, err := h.book.admit(r, p)
	if err != nil {
		writeProblem(w, err)
		return
	}
	// A key given as params.idempotencyKey (SPEC §17) moves to _meta,
	// read only now that the caller is known and admitted.
	if !liftParamsKey(w, r, h.maxBody) {
		done(w.Header())
		return
	}
	ctx := r.Context()
	if r.Method == http.MethodGet {
		// A standalone event stream lasts as long as its session; end it
		// when the server drains, so that shutdown need not wait for it.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(h.draining, cancel)()
	}
	c := &caller{principal: p, stream: r.Context()}
	// The SDK's bearer middleware pins sessions to the principal; it
	// needs a bearer header, which the caller's credentials need not be
	// (a client certificate, a gateway's header). It gets a stand-in: the
	// caller's own credentials go no further than authn.
	r = r.WithContext(context.WithValue(ctx, callerKey{}, c))
	r.Header = r.Header.Clone()
	r.Header.Set("Authorization", "Bearer "+authenticatedStandIn)
	watch := &headerWatcher{ResponseWriter: w, done: done}
	h.next.ServeHTTP(watch, r)
	watch.seen()
}

// Sessions is the number of MCP sessions held, and of those p holds.
func (h *HTTPHandler) Sessions(p idem.Principal) (all, mine int) { return h.book.count(p) }

// Drain ends the standalone event streams (GET) and keeps ending new ones;
// calls in flight finish. Register it with http.Server.RegisterOnShutdown.
func (h *HTTPHandler) Drain() { h.drain() }

// authenticate answers 401 with the HTTP API's problem object unless
// authn accepts the request.
func (h *HTTPHandler) authenticate(w http.ResponseWriter, r *http.Request) (idem.Principal, bool) {
	p, err := h.authn.Authenticate(r)
	if err != nil {
		unauthorized(w, err, h.challenge(r))
		return idem.Principal{}, false
	}
	return p, true
}

func unauthorized(w http.ResponseWriter, err error, challenge string) {
	w.Header().Set("WWW-Authenticate", challenge)
	writeProblem(w, err)
}

// writeProblem answers err as the HTTP API's problem object.
func writeProblem(w http.ResponseWriter, err error) {
	httpapi.Write(w, idem.ErrorResult(err, nil))
}

// checkOrigin refuses a request carrying an Origin header that is not the
// server's own origin (the request's scheme and Host) nor an allowed one:
// a browser page on another origin, possibly reaching a local server
// through DNS rebinding. Requests without Origin (non-browser clients)
// pass.
func (h *HTTPHandler) checkOrigin(r *http.Request) error {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	own, _ := NormalizeOrigin(scheme + "://" + r.Host)
	for _, origin := range r.Header.Values("Origin") {
		if n, err := NormalizeOrigin(origin); err == nil && (n == own || h.origins[n]) {
			continue
		}
		return idem.Errorf(idem.CodeForbidden, "/mcp refuses requests from Origin %q (only %s and the origins of --allowed-origins may call it); "+
			"to let a browser page on that origin call it, start idem serve with --allowed-origins %s", origin, own, origin)
	}
	return nil
}

// NormalizeOrigin returns origin (scheme://host[:port], as a browser sends
// it in the Origin header) in the form origins are compared in: lower-case
// scheme and host, without the scheme's default port. It fails on anything
// else, "null" included.
func NormalizeOrigin(origin string) (string, error) {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("origin %q is not scheme://host[:port] with scheme http or https", origin)
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, nil
}
