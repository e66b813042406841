// Package httpapi is idem's HTTP surface: a route per operation, each
// through the one Runner, plus the catalog, the OpenAPI document, the
// approval, execution and attempt routes, and the operational endpoints.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// DefaultMaxBodyBytes is the request body limit (1 MiB).
const DefaultMaxBodyBytes = 1 << 20

// Config is what NewHandler needs.
type Config struct {
	Runner *pipeline.Runner
	// Store answers readiness probes (GET /readyz).
	Store idem.Store
	Auth  idem.Authenticator
	// Metrics serves GET /metrics; the route is absent when nil.
	Metrics http.Handler
	// MaxBodyBytes limits request bodies; DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	Logger       *slog.Logger
	// BasePath is the prefix the handler is mounted under, with
	// http.StripPrefix ("" at the root): the OpenAPI document's server URL.
	BasePath string
	// Version names the API in the OpenAPI document.
	Version string
	// Routes are extra authenticated routes ("GET /v1/demo/…"), answered
	// by the given function with the caller's principal.
	Routes map[string]func(w http.ResponseWriter, r *http.Request, p idem.Principal)
	// OpenAPI, when set, is served instead of the document built from the
	// runner's descriptors (idem proxy serves its upstream's, with the
	// contracts filled in).
	OpenAPI []byte
	// NoDirectCLIOperations leaves the catalog's directCliOperations
	// empty: the operations are an upstream's (idem proxy).
	NoDirectCLIOperations bool
	// Readiness, when set, adds facts to GET /readyz's data (idem
	// gateway: each upstream's state), which stays 200 while the store
	// answers.
	Readiness func(context.Context) map[string]any
	// ProtectedResource, when set, names the API's protected resource
	// metadata in the challenge of every 401 (resource_metadata).
	ProtectedResource *ProtectedResource
}

// handler is the HTTP surface.
type handler struct {
	cfg     Config
	mux     *http.ServeMux
	catalog []byte
	openapi []byte
	// methods maps a path pattern to its handlers by method.
	methods map[string]map[string]http.HandlerFunc
}

// NewHandler returns the HTTP surface over cfg.Runner.
func NewHandler(cfg Config) http.Handler {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	descs := cfg.Runner.Descriptors()
	h := &handler{
		cfg: cfg, mux: http.NewServeMux(), methods: map[string]map[string]http.HandlerFunc{},
		catalog: Catalog(descs), openapi: cfg.OpenAPI,
	}
	if cfg.NoDirectCLIOperations {
		h.catalog = CatalogWith(descs, nil)
	}
	if h.openapi == nil {
		h.openapi = OpenAPI(descs, OpenAPIInfo{Title: "idem", Version: cfg.Version, ServerURL: cfg.BasePath})
	}
	for _, d := range descs {
		if slices.Contains(d.Surfaces, idem.SurfaceHTTP) {
			pattern, wildcards := idem.MuxPattern(d.Path)
			h.route(d.Method, pattern, h.operation(d, wildcards))
		}
	}
	h.route("GET", "/v1/operations", h.static(h.catalog))
	h.route("GET", "/openapi.json", h.static(h.openapi))
	h.route("GET", "/healthz", h.healthz)
	h.route("GET", "/readyz", h.readyz)
	if cfg.Metrics != nil {
		h.route("GET", "/metrics", cfg.Metrics.ServeHTTP)
	}
	h.route("GET", "/v1/approvals", h.authed(h.listApprovals))
	h.route("GET", "/v1/approvals/{id}", h.authed(h.getApproval))
	h.route("POST", "/v1/approvals/{id}/approve", h.authed(h.decide(true)))
	h.route("POST", "/v1/approvals/{id}/reject", h.authed(h.decide(false)))
	h.route("GET", "/v1/executions/{id}", h.authed(h.getExecution))
	h.route("GET", "/v1/attempts/{key}", h.authed(h.getAttempt))
	for pattern, fn := range cfg.Routes {
		method, path, _ := strings.Cut(pattern, " ")
		h.route(method, path, h.authed(fn))
	}
	for path, byMethod := range h.methods {
		h.mux.HandleFunc(path, h.dispatch(byMethod))
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		write(w, idem.ErrorResult(idem.Errorf(idem.CodeNotFound, "no route %s %s; the operations are listed at GET /v1/operations", r.Method, r.URL.Path), nil))
	})
	return recoverer(cfg.Logger, h.mux)
}

// route adds a handler for method and path; paths are registered once,
// without a method, so that a known path with another method answers 405
// with Allow as a problem object.
func (h *handler) route(method, path string, fn http.HandlerFunc) {
	if h.methods[path] == nil {
		h.methods[path] = map[string]http.HandlerFunc{}
	}
	h.methods[path][method] = fn
}

// dispatch answers HEAD like GET where a path has GET: the same status and
// headers, no body (net/http drops what the handler writes).
func (h *handler) dispatch(byMethod map[string]http.HandlerFunc) http.HandlerFunc {
	if get, ok := byMethod[http.MethodGet]; ok {
		if _, ok := byMethod[http.MethodHead]; !ok {
			byMethod[http.MethodHead] = get
		}
	}
	allowed := make([]string, 0, len(byMethod))
	for m := range byMethod {
		allowed = append(allowed, m)
	}
	slices.Sort(allowed)
	allow := strings.Join(allowed, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		if fn, ok := byMethod[r.Method]; ok {
			fn(w, r)
			return
		}
		resp := idem.ErrorResult(idem.Errorf(idem.CodeMethodNotAllowed, "%s is not allowed on %s; use %s", r.Method, r.URL.Path, allow), nil)
		resp.Header.Set("Allow", allow)
		write(w, resp)
	}
}

// systemPaths are the paths NewHandler serves besides the operations'.
var systemPaths = []string{"/v1/operations", "/openapi.json", "/healthz", "/readyz", "/metrics",
	"/v1/approvals", "/v1/approvals/{id}", "/v1/approvals/{id}/approve", "/v1/approvals/{id}/reject",
	"/v1/executions/{id}", "/v1/attempts/{key}"}

// SystemPaths returns the paths NewHandler serves besides the
// operations' (a copy).
func SystemPaths() []string { return append([]string(nil), systemPaths...) }

// CheckRoutes reports routes of descs that cannot be served: one that is
// idem's own (the system routes, or one of reserved, such as the
// binary's /mcp), or two that ServeMux cannot serve side by side (they
// match the same requests with neither more specific, such as /{a}/x and
// /y/{b}), naming the operation, so that a declaration (an upstream's
// OpenAPI document) is refused before NewHandler would panic or shadow a
// route.
func CheckRoutes(descs []idem.Descriptor, reserved ...string) (err error) {
	mux := http.NewServeMux()
	var current string
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("operation %q: its route cannot be served beside the others: %v", current, v)
		}
	}()
	own := map[string]bool{}
	for _, p := range systemPaths {
		own[p] = true
		mux.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	for _, p := range reserved {
		own[p] = true // served before this handler: only shadowing matters
	}
	for _, d := range descs {
		pattern, _ := idem.MuxPattern(d.Path)
		shadowed := own[pattern]
		for p := range own {
			// A subtree (a path ending in /) takes every path under it.
			shadowed = shadowed || strings.HasSuffix(p, "/") && strings.HasPrefix(pattern+"/", p)
		}
		if shadowed {
			return fmt.Errorf("operation %q: %s %s is one of idem's own routes; serve the API under another path", d.Name, d.Method, d.Path)
		}
	}
	seen := map[string]bool{}
	for _, d := range descs {
		pattern, _ := idem.MuxPattern(d.Path)
		if seen[pattern] {
			continue // several methods on one path are one pattern
		}
		seen[pattern] = true
		current = d.Name
		mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
	}
	return nil
}

// operation serves one operation's route through the runner; wildcards
// maps the pattern's wildcards to the route's parameter names.
func (h *handler) operation(d idem.Descriptor, wildcards map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		meta := &idem.Meta{Operation: d.Name}
		body, release, ok := h.readAdmitted(w, r, meta)
		if !ok {
			return
		}
		defer release()
		// r.URL.Query() drops what it cannot parse (a bad escape, a ";",
		// more than net/url's parameter limit): refuse instead of running
		// on a part of the query.
		query, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			write(w, idem.ErrorResult(idem.Errorf(idem.CodeInvalidInput, "the query string could not be parsed: %v", err).
				WithDetail("errors", []map[string]string{{"path": "", "message": "the query string must be name=value pairs joined by &, percent-encoded"}}), &idem.Meta{Operation: d.Name}))
			return
		}
		wait, err := preferWait(r.Header.Values("Prefer"))
		if err != nil {
			write(w, idem.ErrorResult(idem.Errorf(idem.CodeInvalidInput, "%v", err).
				WithDetail("errors", []map[string]string{{"path": "", "message": err.Error()}}), &idem.Meta{Operation: d.Name}))
			return
		}
		key, dryRun, intentQuery, err := ParseControls(d.Retry, query, r.Header)
		if err == nil {
			err = bodyKeyConflict(key, body)
		}
		if err != nil {
			write(w, idem.ErrorResult(err, &idem.Meta{Operation: d.Name}))
			return
		}
		inv := idem.Invocation{
			Operation: d.Name, Surface: idem.SurfaceHTTP, Principal: p,
			Key: key, DryRun: dryRun, Wait: wait, Connection: r.Context(), ReleaseBody: release,
			Intent: idem.Intent{
				PathParams: make(map[string]string, len(wildcards)), Query: intentQuery,
				Header: declaredHeaders(d, r.Header), Body: body,
			},
		}
		for w, name := range wildcards {
			inv.Intent.PathParams[name] = r.PathValue(w)
		}
		if d.Raw {
			inv.Intent.ContentType, inv.Intent.Passthrough = r.Header.Get("Content-Type"), r.Header
		}
		// The connection's end is Invocation.Connection's to honour: a
		// keyed call outlives it once reserved.
		ctx := context.WithoutCancel(r.Context())
		if h.cfg.Runner.Tracing() && !trace.SpanContextFromContext(ctx).IsValid() {
			// The call's span continues the caller's trace (W3C
			// traceparent), unless the request's own span (server.Handler's
			// instrumentation) already does: then it is that span's child.
			ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		writeCall(w, h.cfg.Runner.Call(ctx, inv), d.Raw)
	}
}

// ParseControls reads the control inputs of an HTTP call of an operation
// with contract retry, in the order of SPEC §6.4: the query parameter
// dryRun (idem.ParseDryRun), then the Idempotency-Key header
// (idem.ParseKeyHeader), which a fresh_read operation does not read at
// all. It returns the key ("" for none), the dry run, and the intent's
// query: query without dryRun.
func ParseControls(retry idem.RetryContract, query url.Values, header http.Header) (key string, dryRun bool, intent url.Values, err error) {
	if dryRun, err = idem.ParseDryRun(query[idem.DryRunParam]); err != nil {
		return "", false, nil, err
	}
	if retry.ReadsKey() {
		if key, err = idem.ParseKeyHeader(header.Values(idem.HeaderIdempotencyKey)); err != nil {
			return "", false, nil, err
		}
	}
	return key, dryRun, idem.IntentQuery(query), nil
}

// bodyKeyConflict refuses a keyed call whose JSON body also carries an
// idempotencyKey member (the flat argument of MCP, SPEC §10.2) with
// another value, as MCP refuses two different keys (issue 33, Low): the
// caller meant one of them, and idem cannot tell which. No operation
// declares an argument of that name (the registry reserves it).
func bodyKeyConflict(key string, body []byte) error {
	if key == "" || !bytes.Contains(body, []byte(`"idempotencyKey"`)) {
		return nil
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil // not an object: the input stage words that
	}
	v, ok := top["idempotencyKey"]
	if !ok {
		return nil
	}
	var inBody string
	if json.Unmarshal(v, &inBody) == nil && inBody == key {
		return nil
	}
	return idem.Errorf(idem.CodeIdempotencyKeyInvalid, "the call carries two different idempotency keys, in the Idempotency-Key header and in the body member idempotencyKey; send the key once, in the Idempotency-Key header")
}

// declaredHeaders keeps only the headers that d declares as inputs
// (in:"header"): no other header reaches the pipeline or the handler.
func declaredHeaders(d idem.Descriptor, h http.Header) http.Header {
	var out http.Header
	for _, p := range d.Params {
		if p.In != "header" {
			continue
		}
		if vs := h.Values(p.Header); len(vs) > 0 {
			if out == nil {
				out = http.Header{}
			}
			out[p.Header] = vs
		}
	}
	return out
}

// authenticate answers 401 unless the configured authenticator accepts
// the request. The challenge names the bearer scheme, with
// error="invalid_token" when the request sent credentials.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) (idem.Principal, bool) {
	p, err := h.cfg.Auth.Authenticate(r)
	if err != nil {
		resp := idem.ErrorResult(err, nil)
		resp.Header.Set("WWW-Authenticate", h.cfg.ProtectedResource.Challenge(r, ""))
		write(w, resp)
		return idem.Principal{}, false
	}
	return p, true
}

// Challenge is the WWW-Authenticate value of a 401 answered to r (RFC
// 6750 §3): error="invalid_request" for several Authorization headers,
// error="invalid_token" for one the authenticator refused.
func Challenge(r *http.Request) string {
	switch n := len(r.Header.Values("Authorization")); {
	case n > 1:
		return `Bearer realm="idem", error="invalid_request"`
	case n == 1:
		return `Bearer realm="idem", error="invalid_token"`
	}
	return `Bearer realm="idem"`
}

func (h *handler) authed(fn func(http.ResponseWriter, *http.Request, idem.Principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p, ok := h.authenticate(w, r); ok {
			fn(w, r, p)
		}
	}
}

// readAdmitted reads the request body within the limit, taking its share
// of the runner's decode budget as the bytes arrive (pipeline.BodyCharge):
// a first share before any byte is read, answered 429 RATE_LIMITED without
// reading when the budget is spent (SPEC §6.8), then more as the body
// fills what it holds. A body sent slowly so holds about what it sent,
// not what it declared, and cannot lock others out; a bodiless request
// takes nothing. release gives the share back (the runner calls it once
// the input is decoded; calling it again is harmless).
func (h *handler) readAdmitted(w http.ResponseWriter, r *http.Request, meta *idem.Meta) (body []byte, release func(), ok bool) {
	if r.ContentLength == 0 {
		return nil, func() {}, true
	}
	charge, err := h.cfg.Runner.ChargeBody(r.Context())
	if err != nil {
		write(w, idem.ErrorResult(err, meta))
		return nil, nil, false
	}
	src := http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	// What the body may still need: its declared length, or the limit,
	// and a byte more to see its end (or that it is over the limit).
	need := h.cfg.MaxBodyBytes + 1
	if r.ContentLength > 0 && r.ContentLength < h.cfg.MaxBodyBytes {
		need = r.ContentLength + 1
	}
	for {
		if int64(len(body)) >= charge.Held() {
			if err := charge.Grow(need); err != nil {
				charge.Release()
				write(w, idem.ErrorResult(err, meta))
				return nil, nil, false
			}
		}
		room := int(charge.Held()) - len(body)
		body = slices.Grow(body, room)
		n, err := src.Read(body[len(body) : len(body)+room])
		body = body[:len(body)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			charge.Release()
			h.bodyFailed(w, err, meta)
			return nil, nil, false
		}
	}
	return body, charge.Release, true
}

// readBody reads the request body within the limit (413 beyond it). A body
// that does not arrive within the server's read timeout answers 408. Read
// errors never reach the caller as they are: they name the connection's
// addresses.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request, meta *idem.Meta) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		h.bodyFailed(w, err, meta)
		return nil, false
	}
	return body, true
}

// bodyFailed answers a body that could not be read whole.
func (h *handler) bodyFailed(w http.ResponseWriter, err error, meta *idem.Meta) {
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		write(w, idem.ErrorResult(idem.Errorf(idem.CodeRequestTooLarge, "the body is over the %d-byte limit; send a smaller one", tooLarge.Limit), meta))
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		write(w, idem.ErrorResult(idem.Errorf(idem.CodeRequestTimeout, "the body did not arrive within the server's read timeout; send the same request again, faster (nothing was stored and no key was consumed)"), meta))
	default:
		write(w, idem.ErrorResult(idem.Errorf(idem.CodeInvalidInput, "the body ended before its declared length or could not be read; send the whole body again").
			WithDetail("errors", []map[string]string{{"path": "", "message": "the body must arrive whole"}}), meta))
	}
}

// preferWait reads the wait preference of the Prefer headers (RFC 7240
// §4.3): wait=N with N delta-seconds (digits, also as a quoted-string,
// which §2 makes equivalent), given once; 0 when absent. The runner caps
// it (pipeline.Config.MaxWait). Other preferences are ignored, as RFC 7240
// asks of preferences a server does not apply, and so are the parameters
// after ";". A malformed wait, or two, is an error in wire terms: the
// caller asked for something the server cannot tell it honours.
func preferWait(values []string) (time.Duration, error) {
	var wait time.Duration
	seen := false
	for _, v := range values {
		for _, pref := range splitUnquoted(v, ',') {
			head := splitUnquoted(pref, ';')[0]
			name, value, hasValue := strings.Cut(head, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			if seen {
				return 0, errors.New("the Prefer header gives wait more than once; send one wait=N")
			}
			seen = true
			value = strings.TrimSpace(value)
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			if !hasValue || value == "" || strings.Trim(value, "0123456789") != "" {
				return 0, fmt.Errorf("Prefer: wait must be a whole number of seconds (digits, e.g. wait=10), got %q", strings.TrimSpace(pref))
			}
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil { // digits beyond int64: as long as the cap
				n = maxPreferWait
			}
			wait = time.Duration(min(n, maxPreferWait)) * time.Second
		}
	}
	return wait, nil
}

// maxPreferWait bounds the seconds preferWait returns, far above any
// runner's cap, so that the conversion to a Duration cannot overflow.
const maxPreferWait = 3600

// splitUnquoted splits s at every sep outside an HTTP quoted-string (RFC
// 9110 §5.6.4: '"' ... '"', with '\' escaping the next byte). An
// unterminated quoted-string runs to the end of s.
func splitUnquoted(s string, sep byte) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// write sends a runner Result, rendered once by Body.
// write sends res: its status, its own headers (a handler's Location and
// ETag, a raw operation's answer's), its body, and the headers in which
// HTTP says what the answer is (SPEC §6.4, §9, §15), from the typed
// fields: Content-Type, Idempotent-Replayed, Preference-Applied,
// Retry-After and, on a raw operation's answers (raw), Idem-Execution-Id.
// These are idem's alone: a raw answer's own are dropped.
func write(w http.ResponseWriter, res idem.Result) { writeCall(w, res, false) }

// Write sends res as the HTTP API answers it (write), for the surfaces
// that answer over HTTP beside it (MCP's refusals before a session),
// without the insufficient_scope challenge: their 403 (a foreign Origin)
// is not about the caller's roles.
func Write(w http.ResponseWriter, res idem.Result) { writeAnswer(w, res, false) }

// writeCall sends res as the HTTP API answers it; a 403 FORBIDDEN (a role
// the caller lacks) carries the insufficient_scope challenge.
func writeCall(w http.ResponseWriter, res idem.Result, raw bool) {
	if res.Problem != nil && res.Problem.Code == idem.CodeForbidden {
		w.Header().Set("WWW-Authenticate", insufficientScope)
	}
	writeAnswer(w, res, raw)
}

func writeAnswer(w http.ResponseWriter, res idem.Result, raw bool) {
	h := w.Header()
	for k, v := range res.Header {
		if !ownHeaders[k] {
			h[k] = v
		}
	}
	switch {
	case res.Raw: // its own Content-Type
	case res.Problem != nil:
		h.Set("Content-Type", idem.ContentTypeProblem)
	default:
		h.Set("Content-Type", idem.ContentTypeJSON)
	}
	if res.Replayed {
		h.Set(idem.HeaderIdempotentReplayed, "true")
	}
	if res.WaitApplied > 0 {
		h.Set(idem.HeaderPreferenceApplied, "wait="+strconv.Itoa(int(res.WaitApplied/time.Second)))
	}
	if res.Problem != nil {
		if d := res.Problem.RetryAfter(); d > 0 {
			h.Set(idem.HeaderRetryAfter, strconv.Itoa(int(d/time.Second)))
		}
	}
	if raw && res.Meta != nil && res.Meta.ExecutionID != "" {
		h.Set(idem.HeaderExecutionID, res.Meta.ExecutionID)
	}
	writeBody(w, res.Status, nil, res.Body())
}

// ownHeaders are the response headers only idem sets (canonical names, as
// net/http and the stores keep them).
var ownHeaders = map[string]bool{idem.HeaderIdempotentReplayed: true, idem.HeaderPreferenceApplied: true, idem.HeaderExecutionID: true}

// writeBody sends an answer with its Content-Length, so that a HEAD answer
// carries the same headers as its GET.
func writeBody(w http.ResponseWriter, status int, header http.Header, body []byte) {
	for k, v := range header {
		w.Header()[k] = v
	}
	if status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeData sends {"data": v} with status 200, or the problem of err.
func writeData(w http.ResponseWriter, v any, err error) {
	if err != nil {
		write(w, idem.ErrorResult(err, nil))
		return
	}
	body, jerr := json.Marshal(struct {
		Data any `json:"data"`
	}{v})
	if jerr != nil {
		write(w, idem.ErrorResult(jerr, nil))
		return
	}
	writeBody(w, http.StatusOK, http.Header{"Content-Type": {idem.ContentTypeJSON}}, body)
}

func (h *handler) static(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeBody(w, http.StatusOK, http.Header{"Content-Type": {idem.ContentTypeJSON}}, body)
	}
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeData(w, map[string]string{"status": "ok"}, nil)
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.cfg.Store.Ping(r.Context()); err != nil {
		write(w, idem.ErrorResult(idem.Unavailable("ping", err), nil))
		return
	}
	data := map[string]any{"status": "ready"}
	if h.cfg.Readiness != nil {
		for k, v := range h.cfg.Readiness(r.Context()) {
			if k != "status" {
				data[k] = v
			}
		}
	}
	writeData(w, data, nil)
}

var approvalStatuses = []idem.ApprovalStatus{idem.ApprovalPending, idem.ApprovalApproved, idem.ApprovalRejected, idem.ApprovalConsumed, idem.ApprovalExpired}

func (h *handler) listApprovals(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	status := idem.ApprovalStatus(r.URL.Query().Get("status"))
	if status != "" && !slices.Contains(approvalStatuses, status) {
		writeData(w, nil, idem.Errorf(idem.CodeInvalidInput, "status %q is not one of pending, approved, rejected, consumed, expired", status).
			WithDetail("errors", []map[string]string{{"path": "/status", "message": "must be one of pending, approved, rejected, consumed, expired"}}))
		return
	}
	list, err := h.cfg.Runner.ListApprovals(r.Context(), p, status)
	if list == nil {
		list = []idem.Approval{}
	}
	writeData(w, list, err)
}

func (h *handler) getApproval(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	a, err := h.cfg.Runner.GetApproval(r.Context(), p, r.PathValue("id"))
	writeData(w, a, err)
}

func (h *handler) decide(approve bool) func(http.ResponseWriter, *http.Request, idem.Principal) {
	return func(w http.ResponseWriter, r *http.Request, p idem.Principal) {
		body, ok := h.readBody(w, r, nil)
		if !ok {
			return
		}
		var in struct {
			Reason string `json:"reason"`
		}
		if len(strings.TrimSpace(string(body))) > 0 {
			if err := json.Unmarshal(body, &in); err != nil {
				writeData(w, nil, idem.Errorf(idem.CodeInvalidInput, "the body must be {\"reason\": \"…\"}, a JSON object with an optional string reason").
					WithDetail("errors", []map[string]string{{"path": "", "message": "must be a JSON object with an optional string reason"}}))
				return
			}
		}
		a, err := h.cfg.Runner.DecideApproval(r.Context(), p, r.PathValue("id"), approve, in.Reason)
		writeData(w, a, err)
	}
}

func (h *handler) getExecution(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	x, err := h.cfg.Runner.GetExecution(r.Context(), p, r.PathValue("id"))
	writeData(w, x, err)
}

func (h *handler) getAttempt(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	a, err := h.cfg.Runner.GetAttempt(r.Context(), p, r.PathValue("key"))
	if idem.ErrorCode(err) == idem.CodeIdempotencyKeyInvalid {
		err = idem.Errorf(idem.CodeNotFound, "no attempt record for that key")
	}
	writeData(w, a, err)
}

// recoverer answers a panic with 500 INTERNAL instead of a dropped
// connection.
func recoverer(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v)
				write(w, idem.ErrorResult(errors.New("panic"), nil))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
