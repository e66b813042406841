package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// flakyAudit is a store whose audit writes (AppendEvents, RecordExecutions)
// fail as an unreachable store does while failures is above 0, each
// failure counting it down; a negative count fails forever.
type flakyAudit struct {
	idem.Store
	failures atomic.Int64
	calls    atomic.Int64
}

func (s *flakyAudit) fail() error {
	s.calls.Add(1)
	if n := s.failures.Load(); n < 0 || (n > 0 && s.failures.CompareAndSwap(n, n-1)) {
		return idem.Unavailable("append events", errors.New("connection lost"))
	}
	return nil
}

func (s *flakyAudit) AppendEvents(ctx context.Context, p idem.AppendEventsParams) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.AppendEvents(ctx, p)
}

func (s *flakyAudit) RecordExecutions(ctx context.Context, p idem.RecordExecutionsParams) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.RecordExecutions(ctx, p)
}

// replayedEvents counts the execution.replayed events of execution id.
func replayedEvents(t *testing.T, f *fixture, id string) int {
	t.Helper()
	x, err := f.runner.GetExecution(t.Context(), agent, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range x.Events {
		if e.Type == idem.EventReplayed {
			n++
		}
	}
	return n
}

// A replay's audit event whose write fails while the store is unreachable
// is written again, not dropped (issue 33 item 9); when the store never
// comes back, the queue gives up after its bounded attempts, holds
// nothing, and counts what it dropped.
func TestAuditQueueRetriesWhatFailed(t *testing.T) {
	var runs atomic.Int64
	base := newFixture(t, nil)
	store := &flakyAudit{Store: base.store}
	f := newFixtureOn(t, base.clock, store, []idem.Operation{createOp(&runs), showOp()})
	pipeline.ShortenAuditBackoff(f.runner, time.Millisecond)
	c := call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}
	first := expect(t, f.do(t.Context(), c), 201, "")

	// Three failures, then the store answers: nothing is lost.
	store.failures.Store(3)
	if r := f.do(t.Context(), c); !r.Replayed {
		t.Fatalf("the same call = %s, want a replay", r.Body())
	}
	if err := f.runner.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := replayedEvents(t, f, first.Meta.ExecutionID); n != 1 || f.runner.AuditDropped() != 0 || store.calls.Load() != 4 {
		t.Fatalf("after 3 failed writes: %d execution.replayed events, %d dropped, %d writes; want 1, 0, 4",
			n, f.runner.AuditDropped(), store.calls.Load())
	}

	// A store that never answers: each replay's event is tried a bounded
	// number of times, then dropped and counted.
	store.failures.Store(-1)
	store.calls.Store(0)
	for range 5 {
		if r := f.do(t.Context(), c); !r.Replayed {
			t.Fatalf("the same call = %s, want a replay", r.Body())
		}
	}
	if err := f.runner.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := f.runner.AuditDropped(); got != 5 {
		t.Fatalf("dropped %d audit events, want the 5 replays' events", got)
	}
	if n := store.calls.Load(); n < 8 || n > 5*8 {
		t.Fatalf("%d writes for 5 events that never land; want at least the 8 attempts of one batch, at most 8 each", n)
	}
	store.failures.Store(0)
	if n := replayedEvents(t, f, first.Meta.ExecutionID); n != 1 {
		t.Fatalf("%d execution.replayed events after the outage, want the first one only", n)
	}
}
