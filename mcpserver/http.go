package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"idem"
	"idem/httpapi"
)

// HTTPOptions configure Handler.
type HTTPOptions struct {
	// SessionTimeout closes a session idle for that long (30 min when 0).
	SessionTimeout time.Duration
	// MaxBodyBytes limits a request body (the HTTP API's limit plus room
	// for the JSON-RPC framing when 0).
	MaxBodyBytes int64
	// Logger receives the SDK's logs; none when nil.
	Logger *slog.Logger
}

// HTTPHandler serves streamable HTTP MCP (at /mcp of idem serve) behind
// the HTTP API's bearer-token auth.
type HTTPHandler struct {
	authn httpapi.Authenticator
	next  http.Handler

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

// tokenLifetime stands in for the expiry the SDK wants on a token: idem
// tokens do not expire, and every request is authenticated anew.
const tokenLifetime = 24 * time.Hour

// Handler returns the streamable HTTP handler of srv. Every request needs
// a bearer token that authn knows (else 401 with the UNAUTHENTICATED
// problem object, as on the HTTP API); a session stays with the principal
// that opened it. Tool handlers get the principal in their context
// (PrincipalFrom) and, for unkeyed calls, are cancelled when the client
// drops the request's stream.
func Handler(srv *mcp.Server, authn httpapi.Authenticator, opts HTTPOptions) *HTTPHandler {
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = 30 * time.Minute
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
			UserID:     c.principal.Org + "\x00" + c.principal.ID,
			Expiration: time.Now().Add(tokenLifetime),
			Extra:      map[string]any{callerExtra: c},
		}, nil
	}
	draining, drain := context.WithCancel(context.Background())
	return &HTTPHandler{authn: authn, next: auth.RequireBearerToken(verify, nil)(sdk), draining: draining, drain: drain}
}

// ServeHTTP implements http.Handler.
func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := h.authenticate(w, r)
	if !ok {
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
	h.next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, callerKey{}, c)))
}

// Drain ends the standalone event streams (GET) and keeps ending new ones;
// calls in flight finish. Register it with http.Server.RegisterOnShutdown.
func (h *HTTPHandler) Drain() { h.drain() }

// authenticate answers 401 with the HTTP API's problem object unless the
// request carries a bearer token authn knows.
func (h *HTTPHandler) authenticate(w http.ResponseWriter, r *http.Request) (idem.Principal, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		unauthorized(w, idem.Errorf(idem.CodeUnauthenticated, "send a token as Authorization: Bearer <token>"), `Bearer realm="idem"`)
		return idem.Principal{}, false
	}
	p, err := h.authn.Authenticate(r.Context(), token)
	if err != nil {
		unauthorized(w, err, `Bearer realm="idem", error="invalid_token"`)
		return idem.Principal{}, false
	}
	return p, true
}

func unauthorized(w http.ResponseWriter, err error, challenge string) {
	resp := idem.ErrorResponse(err, nil)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("WWW-Authenticate", challenge)
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}
