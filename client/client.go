package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/sendonce"
)

// Defaults of the retry bounds (SPEC §10.3).
const (
	DefaultRetries      = 4
	DefaultRetryTimeout = 60 * time.Second
	// DefaultRetryWait is the Prefer: wait a same-key retry sends when the
	// caller set no CallOptions.Wait.
	DefaultRetryWait = 10 * time.Second
)

// maxBody is the default bound of what the client reads of one answer.
const maxBody = 16 << 20

// Client talks to one idem server as one principal (its bearer token).
// It is safe for concurrent use.
type Client struct {
	base      *url.URL
	token     string
	http      *http.Client
	userAgent string
	// backoff is the first retry delay; each retry doubles it up to
	// maxBackoff, with jitter.
	backoff, maxBackoff time.Duration
	// requestTimeout, when set, replaces the per-request timeout derived
	// from the operation's bound.
	requestTimeout time.Duration
	// readRetries and readRetryTimeout bound the retries of catalog and
	// system-route reads.
	readRetries      int
	readRetryTimeout time.Duration
	// answerLimit bounds what the client reads of one answer.
	answerLimit int64

	mu      sync.Mutex
	catalog *Catalog
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client. Redirects are never followed
// whatever it says: a redirected POST would silently become another
// request.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) {
		cp := *h
		c.http = &cp
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithBackoff sets the first retry delay and its cap (defaults 250 ms and
// 5 s). A Retry-After header longer than the delay wins.
func WithBackoff(first, max time.Duration) Option {
	return func(c *Client) { c.backoff, c.maxBackoff = first, max }
}

// WithRequestTimeout bounds every single HTTP request. By default an
// operation call may take the operation's own bound (timeout per attempt
// times attempts, plus backoff), plus any Prefer: wait, plus 15 s; other
// requests 30 s.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// WithReadRetries bounds the automatic retries of the catalog and
// system-route reads (fresh reads): n retries (negative: none) within
// timeout. Defaults: DefaultRetries within DefaultRetryTimeout.
func WithReadRetries(n int, timeout time.Duration) Option {
	return func(c *Client) { c.readRetries, c.readRetryTimeout = n, timeout }
}

// WithAnswerLimit bounds what the client reads of one answer to n bytes
// (default 16 MiB); the rest of a longer body is not read, so the answer
// arrives cut there.
func WithAnswerLimit(n int64) Option { return func(c *Client) { c.answerLimit = n } }

// New returns a client of the server at server (an http or https URL) that
// authenticates with token (none when empty).
func New(server, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server %q is not an http or https URL", server)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: server %q must not carry a query or fragment", server)
	}
	c := &Client{
		base: u, token: token, userAgent: "idem-client",
		http:    &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		backoff: 250 * time.Millisecond, maxBackoff: 5 * time.Second,
		readRetries: DefaultRetries, readRetryTimeout: DefaultRetryTimeout, answerLimit: maxBody,
	}
	for _, o := range opts {
		o(c)
	}
	c.http.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c, nil
}

// Server returns the server's base URL.
func (c *Client) Server() string { return c.base.String() }

// Result is a successful answer (status below 400).
type Result struct {
	Status int
	Header http.Header
	// Body is the answer exactly as the server sent it: the envelope
	// {"data": …, "meta": …}, or the catalog document.
	Body []byte
	// Envelope is Body parsed; Data stays raw.
	Envelope idem.Envelope
	// Requests is how many HTTP requests the call sent (1 + retries).
	Requests int
}

// Replayed reports whether the answer is a replay of a stored attempt
// (meta.idempotency.replayed): historical proof about that attempt, not
// current state.
func (r *Result) Replayed() bool {
	return r.Envelope.Meta != nil && r.Envelope.Meta.Idempotency != nil && r.Envelope.Meta.Idempotency.Replayed
}

// Decode decodes the envelope's data into v.
func (r *Result) Decode(v any) error {
	if len(r.Envelope.Data) == 0 {
		return errors.New("client: the answer carries no data")
	}
	return json.Unmarshal(r.Envelope.Data, v)
}

// Error is a failed call: a problem object the server answered (status 400
// or more), or one the client produced itself (Local), such as
// NETWORK_ERROR when no HTTP answer arrived (Status 0).
type Error struct {
	Code      idem.Code
	Status    int
	Retryable bool
	// Message is the problem's detail.
	Message string
	Details map[string]any
	// Problem is the problem object exactly as the server sent it, or as
	// the client built it when Local.
	Problem json.RawMessage
	Header  http.Header
	// Operation and IdempotencyKey name the call, when it was one.
	Operation      string
	IdempotencyKey string
	// Requests is how many HTTP requests were sent (0 when the client
	// refused the call before sending anything).
	Requests int
	// Local is set when no HTTP answer carries this problem: the client
	// built it (NETWORK_ERROR, an unknown operation, a refused intent).
	Local bool
	// Refused is set when the client refused the call locally because the
	// caller's intent breaks a retry contract (a key with a dry run);
	// nothing was sent.
	Refused bool
	// Err is the cause of a network error.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil && e.Code == idem.CodeNetworkError {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	if e.Code == "" { // an upstream's own answer
		return e.Message
	}
	if e.Status != 0 {
		return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause of a network error.
func (e *Error) Unwrap() error { return e.Err }

// Is matches an *idem.Error or *Error with the same code, so that
// errors.Is(err, idem.Errorf(idem.CodeIdempotencyKeyReused, "")) works.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *idem.Error:
		return t.Code == e.Code
	case *Error:
		return t.Code == e.Code
	}
	return false
}

// Reconcile returns details.reconcile: the read operation to run before
// reporting current state ("" when the problem names none).
func (e *Error) Reconcile() string {
	s, _ := e.Details["reconcile"].(string)
	return s
}

// ApprovalID returns details.approvalId (APPROVAL_REQUIRED, APPROVAL_REJECTED).
func (e *Error) ApprovalID() string {
	s, _ := e.Details["approvalId"].(string)
	return s
}

// localError builds an Error the client produced, with its problem object.
func localError(code idem.Code, meta *idem.Meta, details map[string]any, format string, args ...any) *Error {
	ie := idem.Errorf(code, format, args...)
	ie.Details = map[string]any{"local": true}
	for k, v := range details {
		ie.Details[k] = v
	}
	p := idem.NewProblem(ie, meta)
	raw, _ := json.Marshal(p)
	e := &Error{Code: code, Status: ie.Status, Retryable: ie.Retryable, Message: ie.Message, Details: ie.Details, Problem: raw, Local: true}
	if meta != nil {
		e.Operation = meta.Operation
	}
	return e
}

// RefusedError is the error of a call refused before sending anything,
// because the intent breaks a retry contract: its problem object is the one
// the server would answer (code and status), marked details.local.
func RefusedError(code idem.Code, operation string, details map[string]any, format string, args ...any) *Error {
	var meta *idem.Meta
	if operation != "" {
		meta = &idem.Meta{Operation: operation}
	}
	e := localError(code, meta, details, format, args...)
	e.Refused = true
	return e
}

// answer is one HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// request is one HTTP request to send, possibly several times.
type request struct {
	method string
	path   string // escaped path, from the server's base
	query  url.Values
	body   []byte
	header http.Header
	auth   bool
	// once holds the request to one send (internal/sendonce): a call
	// that may change the world, which only this client's own rules may
	// send again.
	once bool
}

// send sends r once within timeout; a non-nil error means no HTTP answer.
func (c *Client) send(ctx context.Context, r request, timeout time.Duration) (answer, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	target := c.base.String() + r.path
	if q := r.query.Encode(); q != "" {
		target += "?" + q
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return answer{}, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	if v, ok := req.Header[idem.HeaderIdempotencyKey]; ok && len(v) == 1 {
		idem.SetOutgoingKey(req.Header, v[0])
	}
	if r.once {
		// This client retries by its own rules (bounded, counted, with
		// Prefer: wait), never net/http's transports (issue 33 item 1).
		sendonce.Hold(req)
	}
	// The caller's trace context (W3C traceparent, tracestate) travels on.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	if r.body != nil {
		req.Header.Set("Content-Type", idem.ContentTypeJSON)
	}
	if r.auth && c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.answerLimit))
	if err != nil {
		// The status line arrived but not the whole body: no usable answer.
		return answer{}, fmt.Errorf("read the answer to %s %s: %w", r.method, r.path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: raw}, nil
}

// problemError turns an answer of status 400 or more into an *Error. An
// answer that is not an idem problem object (a proxy's error page) gets a
// problem built by the client (foreignError).
func problemError(a answer, operation, key string) *Error {
	var p idem.Problem
	if json.Unmarshal(a.body, &p) == nil && p.Code != "" {
		return &Error{
			Code: p.Code, Status: a.status, Retryable: p.Retryable, Message: p.Detail, Details: p.Details,
			Problem: json.RawMessage(a.body), Header: a.header, Operation: operation, IdempotencyKey: key,
		}
	}
	if a.header.Get(idem.HeaderExecutionID) != "" {
		return upstreamError(a, operation, key)
	}
	return foreignError(a, operation, key)
}

// upstreamError is a raw operation's own answer of 400 or more that is
// not a problem object with a code (a proxied upstream's plain 404): idem
// ran the operation and stored that answer (its Idempotency-Execution-Id
// says so), so it is the upstream's answer, as CallResult reads it, not a
// foreign one. Code is empty (the upstream gave none); Status, Header and
// Problem (the body exactly as sent) are the upstream's, Retryable is
// false (a same-key retry replays it) and details.upstream is true.
func upstreamError(a answer, operation, key string) *Error {
	return &Error{
		Status: a.status, Message: fmt.Sprintf("the upstream answered %d %s: %q", a.status, http.StatusText(a.status), snippetOf(a.body)),
		Details: map[string]any{"upstream": true, "httpStatus": a.status}, Problem: json.RawMessage(a.body), Header: a.header,
		Operation: operation, IdempotencyKey: key,
	}
}

// Upstream reports whether the error is a proxied upstream's own answer
// (see upstreamError): Status, Header and Problem are what it sent.
func (e *Error) Upstream() bool {
	u, _ := e.Details["upstream"].(bool)
	return u && !e.Local
}

// snippetOf is the start of a body, for a message.
func snippetOf(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// foreignError is the problem the client builds for an answer whose body
// is not idem's (an idem problem object, or an envelope below 400): code
// INTERNAL, the answer's status, retryable for 502, 503 and 504, and the
// marker details.foreign.
func foreignError(a answer, operation, key string) *Error {
	snippet := snippetOf(a.body)
	var meta *idem.Meta
	if operation != "" {
		meta = &idem.Meta{Operation: operation}
	}
	what := "an idem problem object"
	if a.status < 400 {
		what = "an idem envelope"
	}
	e := localError(idem.CodeInternal, meta, map[string]any{"foreign": true, "httpStatus": a.status},
		"the server answered %d %s without %s: %q", a.status, http.StatusText(a.status), what, snippet)
	e.Status = a.status
	e.Retryable = a.status == http.StatusBadGateway || a.status == http.StatusServiceUnavailable || a.status == http.StatusGatewayTimeout
	e.Header = a.header
	e.IdempotencyKey = key
	// The problem object says what the client knows: the real status.
	var obj map[string]any
	if json.Unmarshal(e.Problem, &obj) == nil {
		obj["status"] = a.status
		obj["retryable"] = e.Retryable
		e.Problem, _ = json.Marshal(obj)
	}
	return e
}

// Foreign reports whether the problem is the client's reading of an answer
// that did not come from idem (see foreignError): a proxy's error page, a
// body that is not an idem problem object or envelope.
func (e *Error) Foreign() bool {
	f, _ := e.Details["foreign"].(bool)
	return e.Local && f
}

// successResult parses a success answer.
func successResult(a answer, requests int) *Result {
	r := &Result{Status: a.status, Header: a.header, Body: a.body, Requests: requests}
	_ = json.Unmarshal(a.body, &r.Envelope)
	return r
}

// networkError is the NETWORK_ERROR of a call that got no HTTP answer.
func (c *Client) networkError(r request, operation, key, reconcile string, requests int, cause error) *Error {
	shown := cause
	var ue *url.Error
	if errors.As(cause, &ue) {
		shown = ue.Err // the URL is in the message already
	}
	details := map[string]any{"requests": requests}
	if key != "" {
		details["idempotencyKey"] = key
	}
	if reconcile != "" {
		details["reconcile"] = reconcile
	}
	if shown != nil {
		details["cause"] = shown.Error()
	}
	var meta *idem.Meta
	if operation != "" {
		meta = &idem.Meta{Operation: operation}
	}
	what := r.method + " " + r.path
	if operation != "" {
		what = operation + " (" + what + ")"
	}
	e := localError(idem.CodeNetworkError, meta, details, "no HTTP answer from %s to %s after %d request(s): %v", c.base.Redacted(), what, requests, shown)
	e.IdempotencyKey, e.Requests, e.Err = key, requests, cause
	return e
}
