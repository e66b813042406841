package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// upstream is an httptest server that records what it received.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []seenRequest
	count atomic.Int64
}

type seenRequest struct {
	method, uri string
	query       url.Values
	header      http.Header
	body        []byte
}

// newUpstream serves answer after recording each request; a nil answer
// is 200 {"ok":true}.
func newUpstream(t *testing.T, answer http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.count.Add(1)
		u.mu.Lock()
		u.reqs = append(u.reqs, seenRequest{method: r.Method, uri: r.RequestURI, query: r.URL.Query(), header: r.Header.Clone(), body: body})
		u.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) last(t *testing.T) seenRequest {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return u.reqs[len(u.reqs)-1]
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// outgoing records the headers of the requests the Forwarder hands to
// its client, as a map (before the transport writes them).
type outgoing struct {
	base http.RoundTripper
	mu   sync.Mutex
	last http.Header
}

func (o *outgoing) RoundTrip(r *http.Request) (*http.Response, error) {
	o.mu.Lock()
	o.last = r.Header.Clone()
	o.mu.Unlock()
	return o.base.RoundTrip(r)
}

// headerNames lists h's names with the given name in any case.
func namesLike(h http.Header, name string) []string {
	var out []string
	for k := range h {
		if strings.EqualFold(k, name) {
			out = append(out, k)
		}
	}
	return out
}

func callerHeaders() http.Header {
	return http.Header{
		"Authorization":       {"Bearer caller-token"},
		"Connection":          {"keep-alive, X-Hop-Secret", "X-Hop-Other"},
		"Keep-Alive":          {"timeout=5"},
		"Transfer-Encoding":   {"chunked"},
		"Te":                  {"trailers"},
		"Trailer":             {"X-Checksum"},
		"Upgrade":             {"websocket"},
		"Proxy-Authorization": {"Basic cHJveHk6cHJveHk="},
		"Proxy-Connection":    {"keep-alive"},
		"X-Hop-Secret":        {"named by Connection"},
		"X-Hop-Other":         {"named by the second Connection"},
		"Idempotency-Key":     {"caller-key"},
		"Prefer":              {"wait=5"},
		"Content-Length":      {"999"},
		"Host":                {"evil.example"},
		"X-Custom":            {"kept"},
		"Cookie":              {"session=1"},
		"Accept":              {"application/json"},
	}
}

var neverForwarded = []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
	"Proxy-Authorization", "Proxy-Connection", "X-Hop-Secret", "X-Hop-Other", "Prefer"}

func TestForwardHeaders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		writes   bool
		auth     string // UpstreamAuth
		header   http.Header
		body     string
		wantAuth string
		wantCT   string
	}{
		{name: "a write: the caller's Authorization stays with idem", writes: true, header: callerHeaders(), body: `{"a":1}`,
			wantCT: "application/json"},
		{name: "a read: the caller's Authorization stays with idem", header: callerHeaders()},
		{name: "UpstreamAuth replaces Authorization", writes: true, auth: "Bearer upstream-secret", header: callerHeaders(),
			wantAuth: "Bearer upstream-secret"},
		{name: "UpstreamAuth without a caller's Authorization (MCP)", writes: true, auth: "Bearer upstream-secret", body: `{"a":1}`,
			wantAuth: "Bearer upstream-secret", wantCT: "application/json"},
		{name: "the caller's Content-Type is kept", writes: true, body: "plain words",
			header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, wantCT: "text/plain; charset=utf-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, nil)
			rt := &outgoing{base: proxy.NewClient().Transport}
			f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: &http.Client{Transport: rt}, UpstreamAuth: tc.auth}
			op := proxy.Operation{Name: "op", Method: "POST", Path: "/things", Writes: tc.writes}
			call := &idem.Call{Operation: "op", ExecutionID: "exe_1", IdempotencyKey: "ik_handler-1", RequestKey: "caller-key"}
			before := tc.header.Clone()
			res, err := f.Handler(op)(t.Context(), call, idem.RawRequest{Method: "POST", Path: "/things", Header: tc.header, Body: []byte(tc.body)})
			if err != nil || res.Status != 200 {
				t.Fatalf("forward: %+v, %v", res, err)
			}
			for _, name := range neverForwarded {
				if got := namesLike(rt.last, name); len(got) > 0 {
					t.Errorf("%s was forwarded: %q", name, rt.last.Values(got[0]))
				}
			}
			got := up.last(t)
			for _, name := range neverForwarded {
				if v := got.header.Values(name); len(v) > 0 {
					t.Errorf("the upstream received %s: %q", name, v)
				}
			}
			keys := got.header.Values("Idempotency-Key")
			if tc.writes && (len(keys) != 1 || keys[0] != "ik_handler-1") {
				t.Errorf("a write: the upstream received Idempotency-Key %q, want [ik_handler-1]", keys)
			}
			if !tc.writes && len(keys) != 0 {
				t.Errorf("a read: the upstream received Idempotency-Key %q", keys)
			}
			if a := got.header.Values("Authorization"); tc.wantAuth == "" && len(a) != 0 || tc.wantAuth != "" && !slices.Equal(a, []string{tc.wantAuth}) {
				t.Errorf("Authorization %q, want %q", a, tc.wantAuth)
			}
			if ct := got.header.Get("Content-Type"); ct != tc.wantCT {
				t.Errorf("Content-Type %q, want %q", ct, tc.wantCT)
			}
			if string(got.body) != tc.body {
				t.Errorf("body %q, want %q", got.body, tc.body)
			}
			if tc.header != nil && tc.header.Get("X-Custom") != "" && got.header.Get("X-Custom") != "kept" {
				t.Errorf("an end-to-end header was dropped: %v", got.header)
			}
			if tc.header != nil && tc.header.Get("Host") != "" && got.header.Get("Host") != "" {
				t.Errorf("Host forwarded as a header: %v", got.header)
			}
			if tc.header != nil && !equalHeaders(tc.header, before) {
				t.Errorf("the caller's headers were changed in place: %v", tc.header)
			}
		})
	}
}

func TestForwardResponseHeaders(t *testing.T) {
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 201, Status: "201 Created", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{
				"Connection": {"X-Resp-Private"}, "X-Resp-Private": {"hop"}, "Keep-Alive": {"timeout=5"},
				"Transfer-Encoding": {"chunked"}, "Content-Length": {"2"}, "Upgrade": {"h2c"},
				"Content-Type": {"application/json"}, "Location": {"/things/1"}, "Etag": {`"v1"`}, "X-Upstream": {"yes"},
			},
			Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, "http://upstream.invalid"), Client: &http.Client{Transport: rt}}
	res, err := f.Handler(proxy.Operation{Method: "POST", Writes: true})(t.Context(), &idem.Call{IdempotencyKey: "ik_1"},
		idem.RawRequest{Method: "POST", Path: "/things"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Connection", "X-Resp-Private", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Upgrade"} {
		if v := res.Header.Values(name); len(v) > 0 {
			t.Errorf("the answer keeps %s: %q", name, v)
		}
	}
	for _, name := range []string{"Content-Type", "Location", "Etag", "X-Upstream"} {
		if res.Header.Get(name) == "" {
			t.Errorf("the answer lost %s: %v", name, res.Header)
		}
	}
	if res.Status != 201 || string(res.Body) != `{}` {
		t.Fatalf("answer %+v", res)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestForwardPathAndQuery(t *testing.T) {
	for _, tc := range []struct {
		name     string
		upstream string // the upstream's path prefix
		template string
		params   map[string]string
		query    url.Values
		dryRun   bool
		wantPath string // the RequestURI's path, escaped
		wantQ    url.Values
	}{
		{name: "plain", template: "/things/{id}", params: map[string]string{"id": "t1"}, wantPath: "/things/t1"},
		{name: "a base path on the upstream", upstream: "/api/v2", template: "/things/{id}", params: map[string]string{"id": "t1"}, wantPath: "/api/v2/things/t1"},
		{name: "a slash in a parameter stays in its segment", template: "/files/{name}/meta", params: map[string]string{"name": "a/b"}, wantPath: "/files/a%2Fb/meta"},
		{name: "a space and a question mark", template: "/files/{name}", params: map[string]string{"name": "a b?c"}, wantPath: "/files/a%20b%3Fc"},
		{name: "a percent sign", template: "/files/{name}", params: map[string]string{"name": "100%"}, wantPath: "/files/100%25"},
		{name: "unicode", template: "/files/{name}", params: map[string]string{"name": "café"}, wantPath: "/files/caf%C3%A9"},
		{name: "a trailing slash is kept", template: "/things/", wantPath: "/things/"},
		{name: "the query, with repeats in order", template: "/things", query: url.Values{"q": {"a b&c=d"}, "tag": {"y", "x"}},
			wantPath: "/things", wantQ: url.Values{"q": {"a b&c=d"}, "tag": {"y", "x"}}},
		{name: "a dry run adds dryRun=true", template: "/things", query: url.Values{"q": {"1"}}, dryRun: true,
			wantPath: "/things", wantQ: url.Values{"q": {"1"}, "dryRun": {"true"}}},
		{name: "a dry run without a query", template: "/things", dryRun: true, wantPath: "/things", wantQ: url.Values{"dryRun": {"true"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, nil)
			f := &proxy.Forwarder{Upstream: mustURL(t, up.URL+tc.upstream), Client: proxy.NewClient()}
			var query url.Values
			if tc.query != nil {
				query = url.Values{}
				for k, v := range tc.query {
					query[k] = slices.Clone(v)
				}
			}
			req := idem.RawRequest{Method: "GET", Path: idem.FillPath(tc.template, tc.params), PathParams: tc.params, Query: query}
			if _, err := f.Handler(proxy.Operation{Method: "GET"})(t.Context(), &idem.Call{DryRun: tc.dryRun}, req); err != nil {
				t.Fatal(err)
			}
			got := up.last(t)
			path, _, _ := strings.Cut(got.uri, "?")
			if path != tc.wantPath {
				t.Errorf("the upstream got path %s, want %s", path, tc.wantPath)
			}
			if len(got.query) != 0 || tc.wantQ != nil {
				if len(got.query) != len(tc.wantQ) {
					t.Errorf("query %v, want %v", got.query, tc.wantQ)
				}
				for k, v := range tc.wantQ {
					if !slices.Equal(got.query[k], v) {
						t.Errorf("query %s = %q, want %q", k, got.query[k], v)
					}
				}
			}
			if tc.dryRun && query != nil && query.Has(idem.DryRunParam) {
				t.Error("the dry run changed the request's own query")
			}
		})
	}
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// hijacker reads each request whole, then closes the connection without
// an answer, and counts the requests.
func hijacker(t *testing.T, count *atomic.Int64) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/warm" {
			return // keeps the connection for the next request
		}
		count.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(s.Close)
	return s
}

func TestForwardFailures(t *testing.T) {
	post := idem.RawRequest{Method: "POST", Path: "/things", Body: []byte(`{"a":1}`)}
	write := proxy.Operation{Name: "createThing", Method: "POST", Path: "/things", Writes: true}
	call := &idem.Call{IdempotencyKey: "ik_1"}

	t.Run("connection refused is not dispatched", func(t *testing.T) {
		f := &proxy.Forwarder{Upstream: mustURL(t, "http://"+closedPort(t)), Client: proxy.NewClient()}
		_, err := f.Handler(write)(t.Context(), call, post)
		if !idem.IsNotDispatched(err) {
			t.Fatalf("error %v is not NotDispatched", err)
		}
		var e *idem.Error
		if !errors.As(err, &e) || e.Code != idem.CodeUpstreamUnavailable || !e.Retryable || e.Status != 503 {
			t.Fatalf("error %#v, want a retryable 503 UPSTREAM_UNAVAILABLE", err)
		}
		if !strings.Contains(e.Message, "connection refused") || strings.Contains(e.Message, "127.0.0.1") {
			t.Fatalf("message %q", e.Message)
		}
	})

	t.Run("closed after the request was read is dispatched", func(t *testing.T) {
		var n atomic.Int64
		s := hijacker(t, &n)
		f := &proxy.Forwarder{Upstream: mustURL(t, s.URL), Client: proxy.NewClient()}
		_, err := f.Handler(write)(t.Context(), call, post)
		if err == nil || idem.IsNotDispatched(err) {
			t.Fatalf("error %v: want an error that is not NotDispatched", err)
		}
		if n.Load() != 1 {
			t.Fatalf("the upstream got %d requests", n.Load())
		}
	})

	// net/http resends a request it deems replayable when a reused
	// connection breaks; a write must reach the upstream once.
	for _, tc := range []struct {
		name string
		req  idem.RawRequest
	}{
		{"a write without a body on a reused connection is sent once", idem.RawRequest{Method: "DELETE", Path: "/things/1"}},
		{"a write with a body on a reused connection is sent once", idem.RawRequest{Method: "POST", Path: "/things", Body: []byte(`{}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			s := hijacker(t, &n)
			client := proxy.NewClient()
			warm, err := client.Get(s.URL + "/warm")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, warm.Body)
			warm.Body.Close()
			f := &proxy.Forwarder{Upstream: mustURL(t, s.URL), Client: client}
			op := proxy.Operation{Method: tc.req.Method, Writes: true}
			_, err = f.Handler(op)(t.Context(), call, tc.req)
			if err == nil || idem.IsNotDispatched(err) {
				t.Fatalf("error %v: want an error that is not NotDispatched", err)
			}
			if n.Load() != 1 {
				t.Fatalf("the upstream got the write %d times", n.Load())
			}
		})
	}

	t.Run("the caller's deadline while the upstream holds the request", func(t *testing.T) {
		release := make(chan struct{})
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, err := f.Handler(write)(ctx, call, post)
		if !errors.Is(err, context.DeadlineExceeded) || idem.IsNotDispatched(err) {
			t.Fatalf("error %v, want the context's deadline, not NotDispatched", err)
		}
	})

	t.Run("an answer over MaxResponse", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			limit int64
			size  int
			ok    bool
		}{
			{"at the limit", 10, 10, true},
			{"one byte over", 10, 11, false},
			{"the default limit", 0, proxy.DefaultMaxStoredResponse, true},
			{"over the default limit", 0, proxy.DefaultMaxStoredResponse + 1, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
					_, _ = w.Write(bytes.Repeat([]byte("x"), tc.size))
				})
				f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient(), MaxResponse: tc.limit}
				res, err := f.Handler(write)(t.Context(), call, post)
				if tc.ok {
					if err != nil || len(res.Body) != tc.size {
						t.Fatalf("%d bytes, %v", len(res.Body), err)
					}
					return
				}
				var e *idem.Error
				if !errors.As(err, &e) || e.Code != idem.CodeExecutionFailed || idem.IsNotDispatched(err) {
					t.Fatalf("error %v, want EXECUTION_FAILED, dispatched", err)
				}
			})
		}
	})
}

func TestNewClientPassesRedirectsOn(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			t.Error("the redirect was followed")
			return
		}
		w.Header().Set("Location", "/elsewhere")
		w.WriteHeader(http.StatusSeeOther)
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	res, err := f.Handler(proxy.Operation{Method: "POST", Writes: true})(t.Context(), &idem.Call{IdempotencyKey: "ik_1"},
		idem.RawRequest{Method: "POST", Path: "/things", Body: []byte(`{}`)})
	if err != nil || res.Status != http.StatusSeeOther || res.Header.Get("Location") != "/elsewhere" {
		t.Fatalf("answer %+v, %v", res, err)
	}
	if up.count.Load() != 1 {
		t.Fatalf("the upstream got %d requests", up.count.Load())
	}
}

// keyedDoc has a same_key_replay write and its reconcile read.
const keyedDoc = `openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /things:
    get:
      operationId: listThings
      responses: {'200': {description: ok}}
    post:
      operationId: createThing
      x-idem-agent-retry: {kind: same_key_replay, reconcile: listThings, rationale: By key.}
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [name]
              properties:
                name: {type: string}
      responses: {'201': {description: ok}}
  /notes:
    post:
      operationId: createNote
      responses: {'201': {description: ok}}
`

// TestForwardThroughTheRunner: the handler key the upstream receives is
// the execution's, the caller's key and Prefer stay with idem, and a
// replay does not reach the upstream.
func TestForwardThroughTheRunner(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"t1"}`))
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	httpHeader := http.Header{"Idempotency-Key": {"caller-1"}, "Prefer": {"wait=2"}, "Content-Type": {"application/json"},
		"Authorization": {"Bearer caller-token"}}
	res := r.Call(t.Context(), idem.Invocation{
		Operation: "createThing",
		Surface:   idem.SurfaceHTTP,
		Principal: agent,
		Key:       "caller-1",
		Intent:    idem.Intent{Passthrough: httpHeader, ContentType: httpHeader.Get("Content-Type"), Body: []byte(`{"name":"a"}`)},
	})
	if res.Status != 201 {
		t.Fatalf("createThing: %d %s", res.Status, res.Body())
	}
	exe := res.Meta.ExecutionID
	got := up.last(t)
	if keys := got.header.Values("Idempotency-Key"); len(keys) != 1 || keys[0] != "ik_"+strings.TrimPrefix(exe, "exe_") {
		t.Fatalf("the upstream got Idempotency-Key %q for execution %s", keys, exe)
	}
	if got.header.Get("Prefer") != "" {
		t.Fatalf("Prefer forwarded: %v", got.header)
	}
	again := r.Call(t.Context(), idem.Invocation{
		Operation: "createThing",
		Surface:   idem.SurfaceHTTP,
		Principal: agent,
		Key:       "caller-1",
		Intent:    idem.Intent{Passthrough: httpHeader, ContentType: httpHeader.Get("Content-Type"), Body: []byte(`{ "name": "a" }`)},
	})
	if !again.Replayed || !bytes.Equal(again.Body(), res.Body()) || up.count.Load() != 1 {
		t.Fatalf("replay %d %s replayed=%v, upstream calls %d", again.Status, again.Body(), again.Replayed, up.count.Load())
	}
	// The replay's meta (MCP's structuredContent) says what the execution
	// did, as a typed operation's stored envelope does.
	if res.Meta.Attempts != 1 || again.Meta.Attempts != res.Meta.Attempts || again.Meta.ExecutionID != exe {
		t.Fatalf("meta: first %+v, replay %+v", res.Meta, again.Meta)
	}

	// An unkeyed write (no_automatic_retry) still sends a handler key,
	// one per execution.
	var noteKeys []string
	for range 2 {
		if res := r.Call(t.Context(), idem.Invocation{Operation: "createNote", Principal: agent}); res.Status != 201 {
			t.Fatalf("createNote: %d %s", res.Status, res.Body())
		}
		noteKeys = append(noteKeys, up.last(t).header.Get("Idempotency-Key"))
	}
	if noteKeys[0] == "" || noteKeys[0] == noteKeys[1] {
		t.Fatalf("createNote handler keys %q: want two distinct keys", noteKeys)
	}

	// A read: the caller's incidental key is not forwarded.
	res = r.Call(t.Context(), idem.Invocation{
		Operation: "listThings",
		Surface:   idem.SurfaceHTTP,
		Principal: agent,
		Key:       "caller-2",
		Intent:    idem.Intent{Passthrough: http.Header{"Idempotency-Key": {"caller-2"}}},
	})
	if res.Status != 201 {
		t.Fatalf("listThings: %d %s", res.Status, res.Body())
	}
	if keys := up.last(t).header.Values("Idempotency-Key"); len(keys) != 0 {
		t.Fatalf("a read sent Idempotency-Key %q upstream", keys)
	}

	// Over MCP the body comes from the flat arguments, with no headers:
	// it goes upstream as JSON.
	res = r.Call(t.Context(), idem.Invocation{
		Operation: "createThing",
		Surface:   idem.SurfaceMCP,
		Principal: agent,
		Key:       "caller-3",
		Intent:    idem.Intent{Body: []byte(`{"name":"b"}`)},
	})
	if res.Status != 201 {
		t.Fatalf("createThing over MCP: %d %s", res.Status, res.Body())
	}
	if ct := up.last(t).header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("MCP body sent as %q", ct)
	}
}

// TestBodilessOperationRefusesUnknownArguments: an operation without a
// request body takes only its declared parameters. Over HTTP an unknown
// query parameter is refused; over MCP an unknown argument would travel as
// a body the upstream never declared (a GET with a body), so it is refused
// the same way, before the upstream.
func TestBodilessOperationRefusesUnknownArguments(t *testing.T) {
	up := newUpstream(t, nil)
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	place, err := idem.PlaceArguments(nil, map[string]json.RawMessage{"bogus": json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	res := r.Call(t.Context(), idem.Invocation{Operation: "listThings", Surface: idem.SurfaceMCP, Principal: agent,
		Intent: idem.Intent{Body: place.Body}})
	if res.Status != 400 || res.Problem == nil || res.Problem.Code != idem.CodeInvalidInput || !strings.Contains(string(res.Body()), `\"bogus\"`) {
		t.Fatalf("listThings with an unknown argument: %d %s", res.Status, res.Body())
	}
	if n := up.count.Load(); n != 0 {
		t.Fatalf("the upstream was called %d times", n)
	}
	if res := r.Call(t.Context(), idem.Invocation{Operation: "listThings", Surface: idem.SurfaceMCP, Principal: agent}); res.Status != 200 {
		t.Fatalf("listThings without arguments: %d %s", res.Status, res.Body())
	}
}
