package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
)

// TestForwardTraceparent: when idem traces, the upstream's parent span is
// the attempt's, in the caller's trace, and the caller's own traceparent
// and tracestate are replaced; when it does not, they pass as sent.
func TestForwardTraceparent(t *testing.T) {
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	callerHeader := func() http.Header {
		return http.Header{"Content-Type": {"application/json"}, "Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"}, "Tracestate": {"caller=1"}}
	}
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
	runner := func(tp trace.TracerProvider) *pipeline.Runner {
		reg, err := idem.NewRegistry(built.Operations...)
		if err != nil {
			t.Fatal(err)
		}
		store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		r, err := pipeline.New(reg, pipeline.Config{Store: store, TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	t.Run("traced", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		// The context httpapi gives a traced call with this traceparent.
		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: mustTraceID(t, callerTrace), SpanID: mustSpanID(t, callerSpan), TraceFlags: trace.FlagsSampled, Remote: true})
		ctx := trace.ContextWithRemoteSpanContext(t.Context(), parent)
		res := runner(tp).Call(ctx, idem.Invocation{
			Operation: "createThing",
			Surface:   idem.SurfaceHTTP,
			Principal: agent,
			Key:       "k1",
			Intent:    idem.Intent{Passthrough: callerHeader(), Body: []byte(`{"name":"a"}`)},
		})
		if res.Status != 201 {
			t.Fatalf("createThing: %d %s", res.Status, res.Body())
		}
		client := clientSpan(t, rec)
		got := up.last(t).header
		want := "00-" + callerTrace + "-" + client.SpanContext().SpanID().String() + "-01"
		if tp := got.Values("Traceparent"); len(tp) != 1 || tp[0] != want {
			t.Errorf("the upstream got traceparent %q, want %q (the client span's)", tp, want)
		}
		if ts := got.Values("Tracestate"); len(ts) != 0 {
			t.Errorf("the upstream got the caller's tracestate %q", ts)
		}
	})
	t.Run("not traced", func(t *testing.T) {
		res := runner(nil).Call(t.Context(), idem.Invocation{
			Operation: "createThing",
			Surface:   idem.SurfaceHTTP,
			Principal: agent,
			Key:       "k1",
			Intent:    idem.Intent{Passthrough: callerHeader(), Body: []byte(`{"name":"a"}`)},
		})
		if res.Status != 201 {
			t.Fatalf("createThing: %d %s", res.Status, res.Body())
		}
		got := up.last(t).header
		if tp, ts := got.Values("Traceparent"), got.Values("Tracestate"); len(tp) != 1 || tp[0] != callerHeader().Get("Traceparent") || len(ts) != 1 || ts[0] != "caller=1" {
			t.Errorf("the upstream got traceparent %q, tracestate %q; want the caller's", tp, ts)
		}
	})
}

// clientSpan is the one client span of rec, checked to be the attempt's
// child.
func clientSpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	var attempt, client sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.Name() == "idem.attempt":
			attempt = s
		case s.SpanKind() == trace.SpanKindClient:
			if client != nil {
				t.Fatalf("two client spans: %q and %q", client.Name(), s.Name())
			}
			client = s
		}
	}
	if attempt == nil || client == nil {
		t.Fatalf("attempt span %v, client span %v among %d", attempt != nil, client != nil, len(rec.Ended()))
	}
	if client.Parent().SpanID() != attempt.SpanContext().SpanID() {
		t.Errorf("the client span's parent is %s, want the attempt's %s", client.Parent().SpanID(), attempt.SpanContext().SpanID())
	}
	return client
}

const shopDoc = `openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /shops/{shop}/things:
    get:
      operationId: listThings
      parameters:
        - {name: shop, in: path, required: true, schema: {type: string}}
      responses: {'200': {description: ok}}
    post:
      operationId: createThing
      x-idem-agent-retry: {kind: same_key_replay, reconcile: listThings, rationale: By key.}
      parameters:
        - {name: shop, in: path, required: true, schema: {type: string}}
        - {name: color, in: query, schema: {type: string}}
      requestBody:
        required: true
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {'201': {description: ok}}
`

// TestUpstreamClientSpan: the upstream call is a client span under the
// attempt's, named by method and route template, with the HTTP semantic
// conventions' attributes but not the call's inputs; the upstream's
// traceparent names it, in the caller's trace.
func TestUpstreamClientSpan(t *testing.T) {
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"t1"}`))
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL+"/api"), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, shopDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := idem.NewRegistry(built.Operations...)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: mustTraceID(t, callerTrace), SpanID: mustSpanID(t, callerSpan), TraceFlags: trace.FlagsSampled, Remote: true})
	res := runner.Call(trace.ContextWithRemoteSpanContext(t.Context(), parent), idem.Invocation{
		Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent, Key: "key-0815",
		Intent: idem.Intent{
			PathParams: map[string]string{"shop": "shop-4711"}, Query: url.Values{"color": {"red-4711"}},
			Passthrough: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"name":"a"}`),
		},
	})
	if res.Status != 201 {
		t.Fatalf("createThing: %d %s", res.Status, res.Body())
	}
	client := clientSpan(t, rec)
	if client.Name() != "POST /shops/{shop}/things" {
		t.Errorf("client span %q, want POST /shops/{shop}/things", client.Name())
	}
	want := map[string]string{
		"http.request.method": "POST", "http.response.status_code": "201", "url.template": "/shops/{shop}/things",
		"url.full": up.URL + "/api/shops/REDACTED/things?color=REDACTED", "server.address": "127.0.0.1",
	}
	for _, kv := range client.Attributes() {
		if w, ok := want[string(kv.Key)]; ok && kv.Value.Emit() != w {
			t.Errorf("client span: %s = %q, want %q", kv.Key, kv.Value.Emit(), w)
		}
		delete(want, string(kv.Key))
	}
	if len(want) > 0 {
		t.Errorf("client span lacks %v", want)
	}
	got := up.last(t)
	if tp := got.header.Get("Traceparent"); tp != "00-"+callerTrace+"-"+client.SpanContext().SpanID().String()+"-01" {
		t.Errorf("the upstream got traceparent %q, want the client span's in the caller's trace %s", tp, callerTrace)
	}
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "4711") || strings.Contains(v, "0815") {
				t.Errorf("span %q: %s = %q carries an input or the key", s.Name(), kv.Key, v)
			}
		}
	}
}

func mustTraceID(t *testing.T, s string) trace.TraceID {
	id, err := trace.TraceIDFromHex(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustSpanID(t *testing.T, s string) trace.SpanID {
	id, err := trace.SpanIDFromHex(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestProxiedCallTrace: through server.Handler, as idem proxy serves it,
// a proxied call is one trace under the caller's span: the HTTP server
// span, idem.call, the attempt, the upstream's client span, and the
// upstream's traceparent names the last, in the caller's trace.
func TestProxiedCallTrace(t *testing.T) {
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"t1"}`))
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, shopDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv, err := server.New(t.Context(), server.Config{
		Operations: built.Operations, Store: store, Auth: httpapi.NewTokens(map[string]idem.Principal{"tok": agent}),
		Runner: pipeline.Config{TracerProvider: tp}, NoConsole: true, NoDirectCLIOperations: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest("POST", ts.URL+"/shops/shop-4711/things", strings.NewReader(`{"name":"a"}`))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "key-0815")
	req.Header.Set("Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
		if s.SpanContext().TraceID().String() != callerTrace {
			t.Errorf("span %q is in trace %s, not the caller's", s.Name(), s.SpanContext().TraceID())
		}
	}
	parent := callerSpan
	for _, name := range []string{"POST /shops/{shop}/things", "idem.call createThing", "idem.attempt"} {
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no span %q among %v", name, byName)
		}
		if s.Parent().SpanID().String() != parent {
			t.Errorf("span %q under %s, want %s", name, s.Parent().SpanID(), parent)
		}
		parent = s.SpanContext().SpanID().String()
	}
	client := clientSpan(t, rec)
	if got := up.last(t).header.Get("Traceparent"); got != "00-"+callerTrace+"-"+client.SpanContext().SpanID().String()+"-01" {
		t.Errorf("the upstream got traceparent %q, want the client span's", got)
	}
}
