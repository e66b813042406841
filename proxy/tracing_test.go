package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/proxy"
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
		var attempt sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == "idem.attempt" {
				attempt = s
			}
		}
		if attempt == nil {
			t.Fatal("no attempt span")
		}
		got := up.last(t).header
		want := "00-" + callerTrace + "-" + attempt.SpanContext().SpanID().String() + "-01"
		if tp := got.Values("Traceparent"); len(tp) != 1 || tp[0] != want {
			t.Errorf("the upstream got traceparent %q, want %q (the attempt's span)", tp, want)
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
