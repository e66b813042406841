package mcpserver_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/pipeline"
)

const (
	agentTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	agentSpanID  = "00f067aa0ba902b7"
)

// startTraced starts the fixture with a runner that records its spans.
func startTraced(t *testing.T) (*fixture, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return start(t, func(c *pipeline.Config) { c.TracerProvider = tp }), rec
}

// callWithTraceparent calls gadget.create with the agent's trace context
// in _meta.
func callWithTraceparent(t *testing.T, cs *mcp.ClientSession, key string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
		Meta:      mcp.Meta{"traceparent": "00-" + agentTraceID + "-" + agentSpanID + "-01", "tracestate": "agent=1"},
		Name:      "gadget.create",
		Arguments: map[string]any{"shop": "s1", "name": "g", "idempotencyKey": key},
	})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
}

// wantChildOfAgent checks the call span of gadget.create: a server span,
// in the agent's trace, under the agent's span.
func wantChildOfAgent(t *testing.T, rec *tracetest.SpanRecorder, surface string) {
	t.Helper()
	for _, s := range rec.Ended() {
		if s.Name() != "idem.call gadget.create" {
			continue
		}
		if s.SpanContext().TraceID().String() != agentTraceID || s.Parent().SpanID().String() != agentSpanID {
			t.Errorf("call span in trace %s under %s, want %s under %s", s.SpanContext().TraceID(), s.Parent().SpanID(), agentTraceID, agentSpanID)
		}
		if s.SpanKind() != trace.SpanKindServer || s.SpanContext().TraceState().Get("agent") != "1" {
			t.Errorf("call span kind %s, tracestate %q", s.SpanKind(), s.SpanContext().TraceState())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "idem.surface" && kv.Value.AsString() != surface {
				t.Errorf("idem.surface = %s, want %s", kv.Value.AsString(), surface)
			}
		}
		return
	}
	t.Fatalf("no call span among %d", len(rec.Ended()))
}

// TestMetaTraceparentContinuesTheAgentsTrace: over /mcp, the traceparent
// in a tools/call's _meta is the call span's parent.
func TestMetaTraceparentContinuesTheAgentsTrace(t *testing.T) {
	f, rec := startTraced(t)
	callWithTraceparent(t, f.connect(t, tokenAgent), "k1")
	wantChildOfAgent(t, rec, "mcp")
}

// TestRemoteBackendForwardsTraceparent: idem mcp passes the agent's trace
// context on to idem serve as a traceparent header.
func TestRemoteBackendForwardsTraceparent(t *testing.T) {
	f, rec := startTraced(t)
	callWithTraceparent(t, inMemory(t, mcpserver.NewRemoteBackend(f.url, tokenAgent, nil)), "k1")
	wantChildOfAgent(t, rec, "http")
}
