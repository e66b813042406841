package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/keptconn"
	"github.com/idem-run/idem/internal/sendonce"
)

// DefaultMaxStoredResponse bounds an upstream answer (1 MiB): one larger
// is an error the caller sees, never a silent non-replay.
const DefaultMaxStoredResponse = 1 << 20

// Forwarder sends calls to the upstream.
type Forwarder struct {
	Upstream *url.URL
	Client   *http.Client
	// MaxResponse bounds an upstream answer's body
	// (DefaultMaxStoredResponse when 0).
	MaxResponse int64
	// UpstreamAuth, when set, is the Authorization header the upstream
	// receives. The caller's own is never forwarded (see hopByHop).
	UpstreamAuth string

	tracedOnce sync.Once
	traced     *http.Client // Client with the instrumented transport (tracing.go)
}

// hopByHop are the headers of one connection (RFC 9110 §7.6.1), never
// forwarded, with the ones the proxy sets itself or must not pass on:
// the caller's keys (the upstream gets the handler key, see forward), Accept-Encoding (the transport asks for gzip
// and decodes it, so that the body stored for a replay is the one its
// replayed headers describe) and Authorization: the caller's credential is
// idem's, spent on the proxy, and an MCP call has no such header to pass,
// so on every surface the upstream sees --upstream-auth or nothing (the
// MCP authorization rules forbid passing a client's token through).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Host", idem.HeaderIdempotencyKey,
	"X-Idempotency-Key", "Prefer", "Accept-Encoding", "Authorization"}

// NewClient is the upstream client: redirects are answered to the caller,
// not followed (a proxy passes them on).
func NewClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	// A request is refused, not written, on a connection the upstream has
	// closed, and proven unsent when none of it went (Forwarder.send).
	t.DialContext = keptconn.Dial(t.DialContext)
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *Forwarder) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	return http.DefaultClient
}

// Handler is the raw handler that forwards op's calls.
func (f *Forwarder) Handler(op Operation) idem.RawHandler {
	return func(ctx context.Context, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
		return f.forward(ctx, op, call, req)
	}
}

func (f *Forwarder) forward(ctx context.Context, op Operation, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
	target, err := f.target(req.Path)
	if err != nil {
		return idem.RawResponse{}, idem.NotDispatched(err)
	}
	query := req.Query
	if call.DryRun {
		query = cloneValues(query)
		query.Set(idem.DryRunParam, "true")
	}
	target.RawQuery = query.Encode()
	var body io.Reader
	if len(req.Body) > 0 {
		body = bytes.NewReader(req.Body)
	}
	out, err := http.NewRequestWithContext(ctx, req.Method, target.String(), body)
	if err != nil {
		return idem.RawResponse{}, err
	}
	if !op.FreshRead || call.RequestKey != "" {
		// A call that may change the world is sent once: neither
		// net/http's transport nor HTTP/2's re-sends it by itself after
		// a kept-alive connection breaks (issue 33 item 1); idem alone
		// decides a re-send. A fresh read may be re-sent.
		sendonce.Hold(out)
	}
	for name, values := range req.Header {
		out.Header[name] = append([]string(nil), values...)
	}
	removeHopByHop(out.Header)
	if len(req.Body) > 0 && out.Header.Get("Content-Type") == "" {
		out.Header.Set("Content-Type", "application/json") // a body built from flat arguments (MCP)
	}
	if f.UpstreamAuth != "" {
		out.Header.Set("Authorization", f.UpstreamAuth)
	}
	if op.Writes {
		// The handler key: one per execution, the same on every attempt
		// of it (SPEC §7), so that an upstream that deduplicates by key
		// gets end-to-end safety.
		idem.SetOutgoingKey(out.Header, call.IdempotencyKey)
	}
	client := f.client()
	if trace.SpanContextFromContext(ctx).IsValid() {
		// The upstream continues the trace under a client span of this
		// attempt's (or under the caller's span, when idem does not
		// trace), which the instrumented transport injects.
		out.Header.Del("Traceparent")
		out.Header.Del("Tracestate")
		client = f.tracedClient()
		ctx = f.withRoute(ctx, op, target)
	}
	resp, err := f.send(ctx, client, out, req.Body)
	if err != nil {
		return idem.RawResponse{}, err
	}
	defer resp.Body.Close()
	limit := f.MaxResponse
	if limit <= 0 {
		limit = DefaultMaxStoredResponse
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			return idem.RawResponse{}, ctx.Err()
		}
		return idem.RawResponse{}, fmt.Errorf("the upstream's answer (%s) broke off: %w", resp.Status, err)
	}
	if notRun(resp) {
		// The upstream says it did not run the request: its answer goes
		// to the caller, and the key is free for a later retry.
		cause := fmt.Errorf("the upstream answered %s: it did not run the request", resp.Status)
		if int64(len(data)) > limit {
			code := idem.CodeUpstreamUnavailable
			if resp.StatusCode == http.StatusTooManyRequests {
				code = idem.CodeRateLimited
			}
			return idem.RawResponse{}, idem.NotDispatched(idem.Errorf(code, "%v; send the same request again later", cause))
		}
		header := resp.Header.Clone()
		removeHopByHop(header)
		return idem.RawResponse{Status: resp.StatusCode, Header: header, Body: data}, idem.NotDispatched(cause)
	}
	if int64(len(data)) > limit {
		e := idem.Errorf(idem.CodeExecutionFailed, "the upstream answered %s with a body over the %d-byte limit (--max-stored-response), which idem proxy cannot store for a replay", resp.Status, limit)
		return idem.RawResponse{}, e
	}
	header := resp.Header.Clone()
	removeHopByHop(header)
	return idem.RawResponse{Status: resp.StatusCode, Header: header, Body: data}, nil
}

// send sends out through client. A request of which not a byte was
// written to a reused kept-alive connection (the upstream had closed it:
// it restarted, or its idle timeout passed; internal/keptconn) goes once
// more on a new connection, the pool's idle ones dropped first: they were
// most likely closed too. A request proven unsent is idem.NotDispatched;
// one of which any byte went may have run.
func (f *Forwarder) send(ctx context.Context, client *http.Client, out *http.Request, body []byte) (*http.Response, error) {
	for redialed := false; ; redialed = true {
		var watch keptconn.Watch
		var connected atomic.Bool
		try := out.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) {
				connected.Store(true)
				watch.GotConn(info)
			},
		}))
		if len(body) > 0 {
			try.Body = io.NopCloser(bytes.NewReader(body)) // each try reads the body anew
		}
		resp, err := client.Do(try)
		switch {
		case err == nil:
			return resp, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case watch.Stale() && !redialed:
			f.client().CloseIdleConnections()
			continue
		case !connected.Load():
			// No connection was ever made: not a byte reached the
			// upstream.
			return nil, idem.NotDispatched(idem.Errorf(idem.CodeUpstreamUnavailable,
				"the upstream could not be reached (%s); nothing was sent, so the key is not consumed: send the same request again later", dialCause(err)))
		case watch.Unwritten():
			return nil, idem.NotDispatched(idem.Errorf(idem.CodeUpstreamUnavailable,
				"the upstream closed the connection before the request was written; nothing was sent, so the key is not consumed: send the same request again later"))
		}
		return nil, fmt.Errorf("the connection to the upstream broke after the request was sent: %w", err)
	}
}

// notRun reports whether the upstream's answer says it did not run the
// request: a 429 (rate limited), or a 503 that says when to come back
// (Retry-After). A 503 without it may come from a request the upstream
// began, so it stays indeterminate like any other 5xx.
func notRun(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
}

// target is the upstream URL of a concrete path (its parameters
// percent-encoded, FillPath): appended to the upstream's own path as it
// is, never cleaned or escaped twice.
func (f *Forwarder) target(path string) (*url.URL, error) {
	u := *f.Upstream
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		return nil, idem.Errorf(idem.CodeInvalidInput, "the concrete path %q is not percent-encoded: %v", path, err)
	}
	for _, seg := range strings.Split(unescaped, "/") {
		if seg == "." || seg == ".." {
			// The pipeline refuses such parameters; this is the last line.
			return nil, idem.NotDispatched(idem.Errorf(idem.CodeInvalidInput, "the path %q has a dot segment, which would reach another path upstream", path))
		}
	}
	base := strings.TrimRight(u.EscapedPath(), "/")
	u.Path = strings.TrimRight(u.Path, "/") + unescaped
	u.RawPath = base + path
	return &u, nil
}

// removeHopByHop deletes the hop-by-hop headers, and those the
// Connection header names.
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			h.Del(textproto.TrimString(name))
		}
	}
	for name := range h {
		// By every spelling: a Go caller may use non-canonical keys.
		for _, hop := range hopByHop {
			if strings.EqualFold(name, hop) {
				delete(h, name)
			}
		}
	}
}

// dialCause words a failure to connect without the addresses of the
// proxy's own side.
func dialCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case strings.Contains(msg, "no such host"):
		return "no such host"
	case strings.Contains(msg, "timeout"):
		return "connect timeout"
	}
	return "connect failed"
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v)+1)
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
