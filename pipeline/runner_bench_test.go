package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// BenchmarkKeyedCall measures the runner with a store and a trivial
// handler, in parallel (-cpu sets the callers): first executions with
// fresh keys, and replays of one completed key. It is the in-process part
// of what bench/ measures over HTTP; use it with -cpuprofile.
func BenchmarkKeyedCall(b *testing.B) {
	stores := map[string]func(*testing.B) idem.Store{
		"sqlite": func(b *testing.B) idem.Store { return newSQLiteStore(b, idem.SystemClock{}) },
		"pg":     func(b *testing.B) idem.Store { return newPGStores(b, idem.SystemClock{}, 1)[0] },
	}
	for name, open := range stores {
		b.Run(name+"/first", func(b *testing.B) {
			r := benchRunner(b, open(b))
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
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
		})
		b.Run(name+"/replay", func(b *testing.B) {
			r := benchRunner(b, open(b))
			req := idem.Invocation{Operation: "thing.create", Principal: agent, Key: "k", Intent: idem.Intent{Body: []byte(`{"name":"a"}`)}}
			r.Call(b.Context(), req)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if resp := r.Call(b.Context(), req); !resp.Replayed {
						b.Fatalf("status %d not replayed: %s", resp.Status, resp.Body())
					}
				}
			})
		})
	}
}

func benchRunner(b *testing.B, store idem.Store) *pipeline.Runner {
	var runs atomic.Int64
	reg, err := idem.NewRegistry(createOp(&runs), showOp())
	if err != nil {
		b.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Flush(b.Context()) })
	return r
}

// BenchmarkReplayLogging measures a replay answered from memory with the
// log line of every successful replay, 1 % of them, none, and no logger
// (Config.ReplayLogRate; the JSON handler writes to io.Discard).
func BenchmarkReplayLogging(b *testing.B) {
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
		rate   float64
	}{
		{"json-every", slog.New(slog.NewJSONHandler(io.Discard, nil)), 1},
		{"json-1pct", slog.New(slog.NewJSONHandler(io.Discard, nil)), 0.01},
		{"json-none", slog.New(slog.NewJSONHandler(io.Discard, nil)), 0},
		{"nil-logger", nil, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var runs atomic.Int64
			reg, err := idem.NewRegistry(createOp(&runs), showOp())
			if err != nil {
				b.Fatal(err)
			}
			r, err := pipeline.New(reg, pipeline.Config{Store: newSQLiteStore(b, idem.SystemClock{}), Logger: tc.logger, ReplayLogRate: tc.rate})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Flush(context.Background()) })
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
