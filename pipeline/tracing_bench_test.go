package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// BenchmarkTracing measures what tracing costs a call on SQLite, one
// caller: off (no TracerProvider, the default), a no-op provider (the
// spans' API calls, nothing recorded), and the SDK recording every span
// and batching it to an exporter that drops it (the cost of tracing short
// of the network). first is a keyed first execution (store phases and an
// attempt), replay a replay from memory (the call span only).
func BenchmarkTracing(b *testing.B) {
	providers := []struct {
		name string
		tp   func(b *testing.B) trace.TracerProvider
	}{
		{"off", func(*testing.B) trace.TracerProvider { return nil }},
		{"noop-provider", func(*testing.B) trace.TracerProvider { return noop.NewTracerProvider() }},
		{"sdk-recording", func(b *testing.B) trace.TracerProvider {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			return tp
		}},
	}
	for _, p := range providers {
		b.Run(p.name+"/first", func(b *testing.B) {
			r := tracedBenchRunner(b, p.tp(b))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				resp := r.Call(b.Context(), idem.Invocation{
					Operation: "thing.create",
					Principal: agent,
					Key:       fmt.Sprint("k", i),
					Intent:    idem.Intent{Body: fmt.Appendf(nil, `{"name":"n%d"}`, i)},
				})
				if resp.Status != 201 || resp.Replayed {
					b.Fatalf("status %d replayed %v: %s", resp.Status, resp.Replayed, resp.Body())
				}
			}
		})
		b.Run(p.name+"/replay", func(b *testing.B) {
			r := tracedBenchRunner(b, p.tp(b))
			req := idem.Invocation{Operation: "thing.create", Principal: agent, Key: "k", Intent: idem.Intent{Body: []byte(`{"name":"a"}`)}}
			r.Call(b.Context(), req)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if resp := r.Call(b.Context(), req); !resp.Replayed {
					b.Fatalf("status %d not replayed: %s", resp.Status, resp.Body())
				}
			}
		})
	}
}

func tracedBenchRunner(b *testing.B, tp trace.TracerProvider) *pipeline.Runner {
	var runs atomic.Int64
	reg, err := idem.NewRegistry(createOp(&runs), showOp())
	if err != nil {
		b.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: newSQLiteStore(b, idem.SystemClock{}), TracerProvider: tp,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Flush(b.Context()) })
	return r
}
