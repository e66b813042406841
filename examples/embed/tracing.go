package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem/telemetry"
)

// tracing is the OTLP trace pipeline the OTEL_* environment asks for
// (telemetry.FromEnv); provider is nil, and tracing off, without it.
type tracing struct {
	provider trace.TracerProvider
	stop     func(context.Context) error
}

func setupTracing(ctx context.Context) (tracing, error) {
	tp, stop, err := telemetry.FromEnv(ctx, "embed-example")
	if err != nil {
		return tracing{}, err
	}
	return tracing{provider: tp, stop: stop}, nil
}

// shutdown flushes the spans still buffered (5 s at most).
func (t tracing) shutdown() {
	if t.stop == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.stop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "embed: flushing traces:", err)
	}
}
