package pipeline_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// Config.ReplayLogRate means what idem serve's --log-replays means: 0
// logs no successful replay, 1 every one; a rate outside 0..1 is refused.
// (It once meant "every one" at 0, while --log-replays 0 meant none.)
func TestReplayLogRateZeroLogsNone(t *testing.T) {
	for _, tc := range []struct {
		rate    float64
		replays int // lines of replays among 3 replays
	}{{0, 0}, {1, 3}} {
		var runs atomic.Int64
		reg, err := idem.NewRegistry(createOp(&runs), showOp())
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		r, err := pipeline.New(reg, pipeline.Config{Store: newSQLiteStore(t, idem.SystemClock{}),
			Logger: slog.New(slog.NewJSONHandler(&buf, nil)), ReplayLogRate: tc.rate})
		if err != nil {
			t.Fatal(err)
		}
		req := idem.Invocation{Operation: "thing.create", Principal: agent, Key: "k", Intent: idem.Intent{Body: []byte(`{"name":"a"}`)}}
		for i := range 4 {
			if resp := r.Call(t.Context(), req); resp.Replayed != (i > 0) {
				t.Fatalf("call %d: replayed %t, status %d", i+1, resp.Replayed, resp.Status)
			}
		}
		_ = r.Flush(context.Background())
		if n := strings.Count(buf.String(), `"replayed":true`); n != tc.replays {
			t.Errorf("ReplayLogRate %g: %d replay lines, want %d:\n%s", tc.rate, n, tc.replays, buf.String())
		}
		if n := strings.Count(buf.String(), `"replayed":false`); n != 1 {
			t.Errorf("ReplayLogRate %g: %d execution lines, want 1", tc.rate, n)
		}
	}
	reg, err := idem.NewRegistry(showOp())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.New(reg, pipeline.Config{Store: newSQLiteStore(t, idem.SystemClock{}), ReplayLogRate: -1}); err == nil || !strings.Contains(err.Error(), "ReplayLogRate") {
		t.Errorf("ReplayLogRate -1: %v; want a refusal naming it", err)
	}
}
