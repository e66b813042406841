package httpapi_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem/pipeline"
)

// TestTraceparentContinuesTheCallersTrace: a call's span is a child of the
// span a request's traceparent names, and a server span.
func TestTraceparentContinuesTheCallersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := startServerWith(t, sqliteStore, pipeline.Config{TracerProvider: tp})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	s.send(t, "POST", "/v1/shops/s1/widgets", tokenAgent, hdr{
		"Idempotency-Key": {"k1"}, "Traceparent": {"00-" + traceID + "-" + parentID + "-01"}, "Tracestate": {"vendor=1"},
	}, `{"name":"a"}`).expect(t, 201, "")

	var call sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "idem.call widget.create" {
			call = sp
		}
	}
	if call == nil {
		t.Fatalf("no call span among %d", len(rec.Ended()))
	}
	if call.SpanContext().TraceID().String() != traceID || call.Parent().SpanID().String() != parentID || !call.Parent().IsRemote() {
		t.Errorf("call span in trace %s under %s, want %s under %s", call.SpanContext().TraceID(), call.Parent().SpanID(), traceID, parentID)
	}
	if call.SpanKind() != trace.SpanKindServer || call.SpanContext().TraceState().Get("vendor") != "1" {
		t.Errorf("call span kind %s, tracestate %q", call.SpanKind(), call.SpanContext().TraceState())
	}
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID() != call.SpanContext().TraceID() {
			t.Errorf("span %s is in another trace", sp.Name())
		}
	}
}
