package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/server"
)

type thingIn struct {
	Shop string `json:"shop" in:"path"`
	Name string `json:"name"`
}

type thingOut struct {
	Name string `json:"name"`
}

// thingOp is POST /v1/shops/{shop}/things, keyed; the name "boom" fails
// with a 500.
var thingOp = idem.Define(idem.Metadata{
	Name: "thing.create", Method: "POST", Path: "/v1/shops/{shop}/things", Summary: "Create a thing",
	SideEffect: idem.SideEffectWrite,
	Retry:      idem.RetryContract{Kind: idem.RetrySameKeyReplay, Rationale: "a key replays", Reconcile: "thing.list"},
}, func(ctx context.Context, call *idem.Call, in thingIn) (thingOut, error) {
	if in.Name == "boom" {
		return thingOut{}, errors.New("boom")
	}
	return thingOut{Name: in.Name}, nil
})

type storeIn struct {
	StoreID string `json:"store-id" in:"path"`
}

// storeOp's parameter is no Go identifier: the mux's wildcard is another.
var storeOp = idem.Define(idem.Metadata{Name: "store.get", Method: "GET", Path: "/v1/stores/{store-id}", Summary: "A store", SideEffect: idem.SideEffectRead},
	func(ctx context.Context, call *idem.Call, in storeIn) (storeIn, error) { return in, nil })

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	// secretish are the inputs and the key of the calls below: no span may
	// carry them (SPEC §13).
	shopInput = "shop-4711"
	keyInput  = "key-0815"
)

// tracedServer serves thingOp through server.Handler with every span
// recorded.
func tracedServer(t *testing.T) (*httptest.Server, *tracetest.SpanRecorder) {
	t.Helper()
	return tracedServerAt(t, "")
}

// tracedServerAt is tracedServer mounted under base.
func tracedServerAt(t *testing.T, base string) (*httptest.Server, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv, err := server.New(t.Context(), server.Config{
		Operations: []idem.Operation{thingOp, echoOp("thing.list", "/v1/things"), storeOp}, Store: openStore(t), Auth: httpapi.NewTokens(agentToken),
		Runner: pipeline.Config{TracerProvider: tp}, NoConsole: true, BasePath: base,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if base != "" {
		mux := http.NewServeMux()
		mux.Handle(base+"/", http.StripPrefix(base, h))
		h = mux
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts, rec
}

// send sends a request with the agent's token (unless auth is false) and
// the caller's traceparent, and returns the status.
func send(t *testing.T, ts *httptest.Server, method, path, body string, auth bool, header ...string) int {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agent/1.0")
	req.Header.Set("Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	if auth {
		req.Header.Set("Authorization", "Bearer tok")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// serverSpan is the one server span recorded, after rec was reset.
func serverSpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d server spans, want 1 (of %d)", len(found), len(rec.Ended()))
	}
	return found[0]
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks the attributes of s that want names ("" for absent).
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		g, ok := got[k]
		switch {
		case v == "" && ok:
			t.Errorf("span %q has %s = %s, want none", s.Name(), k, g.Emit())
		case v != "" && g.Emit() != v:
			t.Errorf("span %q: %s = %q, want %q", s.Name(), k, g.Emit(), v)
		}
	}
}

// noInputs checks that no span of rec carries the calls' inputs or keys.
func noInputs(t *testing.T, rec *tracetest.SpanRecorder) {
	t.Helper()
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, shopInput) || strings.Contains(v, keyInput) {
				t.Errorf("span %q: %s = %q carries an input or a key", s.Name(), kv.Key, v)
			}
		}
	}
}

// TestServerSpanOfAnOperation: a call's request makes one server span,
// named by method and route template, with the HTTP semantic conventions'
// attributes, in the caller's trace; idem's call span is its child.
func TestServerSpanOfAnOperation(t *testing.T) {
	ts, rec := tracedServer(t)
	if c := send(t, ts, "POST", "/v1/shops/"+shopInput+"/things", `{"name":"a"}`, true, "Idempotency-Key", keyInput); c != 200 {
		t.Fatalf("POST: %d", c)
	}
	srv := serverSpan(t, rec)
	if srv.Name() != "POST /v1/shops/{shop}/things" {
		t.Errorf("server span %q, want POST /v1/shops/{shop}/things", srv.Name())
	}
	if srv.SpanContext().TraceID().String() != callerTrace || srv.Parent().SpanID().String() != callerSpan || !srv.Parent().IsRemote() {
		t.Errorf("server span in trace %s under %s, want the caller's %s under %s", srv.SpanContext().TraceID(), srv.Parent().SpanID(), callerTrace, callerSpan)
	}
	wantAttrs(t, srv, map[attribute.Key]string{
		"http.request.method": "POST", "http.route": "/v1/shops/{shop}/things", "http.response.status_code": "200",
		"url.path": "/v1/shops/REDACTED/things", "url.scheme": "http", "server.address": "127.0.0.1",
		"client.address": "127.0.0.1", "user_agent.original": "agent/1.0", "error.type": "",
	})
	var call sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "idem.call thing.create" {
			call = s
		}
	}
	if call == nil {
		t.Fatal("no idem.call span")
	}
	if call.Parent().SpanID() != srv.SpanContext().SpanID() || call.SpanKind() != trace.SpanKindInternal {
		t.Errorf("idem.call is %s under %s, want internal under the server span %s", call.SpanKind(), call.Parent().SpanID(), srv.SpanContext().SpanID())
	}
	noInputs(t, rec)
}

// TestServerSpanOfEveryAnswer: refusals before any call (401, 404, 405),
// system routes and failures make a server span too.
func TestServerSpanOfEveryAnswer(t *testing.T) {
	ts, rec := tracedServer(t)
	for _, c := range []struct {
		name, method, path, body string
		auth                     bool
		status                   int
		span                     string
		want                     map[attribute.Key]string
	}{
		{"unauthenticated", "POST", "/v1/shops/" + shopInput + "/things", `{"name":"a"}`, false, 401, "POST /v1/shops/{shop}/things",
			map[attribute.Key]string{"http.route": "/v1/shops/{shop}/things", "http.response.status_code": "401", "error.type": ""}},
		{"no route", "GET", "/v1/nothing-here", "", true, 404, "GET",
			map[attribute.Key]string{"http.route": "", "http.response.status_code": "404", "url.path": "/v1/nothing-here"}},
		{"method not allowed", "DELETE", "/v1/shops/" + shopInput + "/things", "", true, 405, "DELETE /v1/shops/{shop}/things",
			map[attribute.Key]string{"http.route": "/v1/shops/{shop}/things", "http.response.status_code": "405"}},
		{"attempt", "GET", "/v1/attempts/" + keyInput, "", true, 404, "GET /v1/attempts/{key}",
			map[attribute.Key]string{"http.route": "/v1/attempts/{key}", "url.path": "/v1/attempts/REDACTED"}},
		{"catalog", "GET", "/v1/operations", "", false, 200, "GET /v1/operations",
			map[attribute.Key]string{"http.route": "/v1/operations", "url.path": "/v1/operations"}},
		{"health", "GET", "/healthz", "", false, 200, "GET /healthz", map[attribute.Key]string{"http.route": "/healthz"}},
		{"declared template", "GET", "/v1/stores/" + shopInput, "", true, 200, "GET /v1/stores/{store-id}",
			map[attribute.Key]string{"http.route": "/v1/stores/{store-id}", "url.path": "/v1/stores/REDACTED"}},
		{"server failure", "POST", "/v1/shops/" + shopInput + "/things", `{"name":"boom"}`, true, 500, "POST /v1/shops/{shop}/things",
			map[attribute.Key]string{"http.response.status_code": "500", "error.type": "500"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.Reset()
			if got := send(t, ts, c.method, c.path, c.body, c.auth, "Idempotency-Key", keyInput); got != c.status {
				t.Fatalf("%s %s: %d, want %d", c.method, c.path, got, c.status)
			}
			srv := serverSpan(t, rec)
			if srv.Name() != c.span {
				t.Errorf("server span %q, want %q", srv.Name(), c.span)
			}
			wantAttrs(t, srv, c.want)
			noInputs(t, rec)
		})
	}
	// The failure's call span says its code.
	for _, s := range rec.Ended() {
		if s.Name() == "idem.call thing.create" {
			wantAttrs(t, s, map[attribute.Key]string{"error.type": string(idem.CodeExecutionFailed)})
		}
	}
}

// TestServerSpanUnderABasePath: mounted under Config.BasePath (with
// http.StripPrefix in a mux), the spans name the routes and paths the
// caller sees, with the prefix.
func TestServerSpanUnderABasePath(t *testing.T) {
	ts, rec := tracedServerAt(t, "/idem")
	for _, c := range []struct {
		path, span string
		status     int
		want       map[attribute.Key]string
	}{
		{"/idem/v1/shops/" + shopInput + "/things", "POST /idem/v1/shops/{shop}/things", 200,
			map[attribute.Key]string{"http.route": "/idem/v1/shops/{shop}/things", "url.path": "/idem/v1/shops/REDACTED/things"}},
		// No route of idem's matched: the route is the mount's, which did.
		{"/idem/v1/nothing", "POST /idem/", 404, map[attribute.Key]string{"http.route": "/idem/", "url.path": "/idem/v1/nothing"}},
	} {
		rec.Reset()
		if got := send(t, ts, "POST", c.path, `{"name":"a"}`, true, "Idempotency-Key", keyInput); got != c.status {
			t.Fatalf("POST %s: %d, want %d", c.path, got, c.status)
		}
		srv := serverSpan(t, rec)
		if srv.Name() != c.span {
			t.Errorf("server span %q, want %q", srv.Name(), c.span)
		}
		wantAttrs(t, srv, c.want)
	}
}

// bearerTransport sends the agent's token.
type bearerTransport struct{}

func (bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer tok")
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPToolCallSpan: over /mcp a tools/call is a server span named
// "tools/call <tool>" with the MCP semantic conventions' attributes, under
// the agent's span from _meta and linked to the HTTP request's span
// ("POST /mcp"), or under the latter without _meta; idem.call is its child.
// An error result is error.type tool_error.
func TestMCPToolCallSpan(t *testing.T) {
	ts, rec := tracedServer(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	find := func(name string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == name {
				out = append(out, s)
			}
		}
		return out
	}
	for _, c := range []struct {
		name    string
		meta    mcp.Meta
		args    map[string]any
		isError bool
	}{
		{"with _meta", mcp.Meta{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}, map[string]any{"shop": shopInput, "name": "a", "idempotencyKey": keyInput}, false},
		{"without _meta", nil, map[string]any{"shop": shopInput, "name": "b", "idempotencyKey": keyInput + "b"}, false},
		{"error result", nil, map[string]any{"shop": shopInput, "name": "c"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.Reset()
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Meta: c.meta, Name: "thing.create", Arguments: c.args})
			if err != nil || res.IsError != c.isError {
				t.Fatalf("call: %v, isError %v", err, res.IsError)
			}
			tool := find("tools/call thing.create")
			if len(tool) != 1 {
				t.Fatalf("%d tools/call spans among %d", len(tool), len(rec.Ended()))
			}
			// The HTTP request's span: the POST that carried the call,
			// started (it may end after the client has the result), among
			// others the client sends (notifications).
			post := map[trace.SpanID]bool{}
			for _, s := range rec.Started() {
				if s.SpanKind() == trace.SpanKindServer && strings.HasPrefix(s.Name(), "POST") {
					post[s.SpanContext().SpanID()] = true
				}
			}
			span := tool[0]
			if span.SpanKind() != trace.SpanKindServer {
				t.Errorf("tools/call span is %s, want server", span.SpanKind())
			}
			if c.meta != nil {
				if span.SpanContext().TraceID().String() != callerTrace || span.Parent().SpanID().String() != callerSpan {
					t.Errorf("tools/call span in trace %s under %s, want the agent's %s under %s", span.SpanContext().TraceID(), span.Parent().SpanID(), callerTrace, callerSpan)
				}
				if l := span.Links(); len(l) != 1 || !post[l[0].SpanContext.SpanID()] {
					t.Errorf("tools/call span links %v, want the HTTP request's span", l)
				}
			} else if !post[span.Parent().SpanID()] {
				t.Errorf("tools/call span under %s, want a POST /mcp span", span.Parent().SpanID())
			}
			errorType := ""
			if c.isError {
				errorType = "tool_error"
			}
			wantAttrs(t, span, map[attribute.Key]string{
				"mcp.method.name": "tools/call", "gen_ai.tool.name": "thing.create", "gen_ai.operation.name": "execute_tool",
				"network.transport": "tcp", "mcp.protocol.version": cs.InitializeResult().ProtocolVersion, "error.type": errorType,
			})
			if id := attrs(span)["mcp.session.id"].AsString(); id == "" || id == cs.ID() {
				t.Errorf("mcp.session.id = %q, want a digest of the session id %q", id, cs.ID())
			}
			call := find("idem.call thing.create")
			if len(call) != 1 || call[0].Parent().SpanID() != span.SpanContext().SpanID() || call[0].SpanKind() != trace.SpanKindInternal {
				t.Errorf("idem.call is not the tools/call span's internal child")
			}
			noInputs(t, rec)
		})
	}
}
