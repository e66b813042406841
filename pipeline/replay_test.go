package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// countingStore counts the reads of a key's record: GetAttempt calls and
// reservations (which read the key when stage 5 is left to them), and
// fails them while down.
type countingStore struct {
	idem.Store
	gets atomic.Int64
	down atomic.Bool
}

func (s *countingStore) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	s.gets.Add(1)
	if s.down.Load() {
		return idem.ReserveResult{}, idem.Unavailable("reserve", context.DeadlineExceeded)
	}
	return s.Store.Reserve(ctx, p)
}

func (s *countingStore) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	s.gets.Add(1)
	if s.down.Load() {
		return idem.Attempt{}, idem.Unavailable("get attempt", context.DeadlineExceeded)
	}
	return s.Store.GetAttempt(ctx, p)
}

func TestReplaysServedFromMemoryUntilRetentionNears(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, nil)
	store := &countingStore{Store: f.store}
	f = newFixtureOn(t, f.clock, store, []idem.Operation{createOp(&runs), showOp()})
	first := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}), 201, "")

	store.down.Store(true) // a replay from memory needs no store read
	before := store.gets.Load()
	for range 3 {
		again := f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"})
		if d := expect(t, again, 201, ""); !again.Replayed || d.Meta.ExecutionID != first.Meta.ExecutionID {
			t.Fatalf("replay = %s", again.Body())
		}
	}
	if got := store.gets.Load() - before; got != 0 {
		t.Errorf("3 replays read the store %d times, want 0", got)
	}
	// Another intent under the key is still refused, from memory too.
	expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"b"}`, key: "k1"}), 422, idem.CodeIdempotencyKeyReused)
	store.down.Store(false)

	// The replay events reach the audit trail (written off the request path).
	x, err := f.runner.GetExecution(t.Context(), agent, first.Meta.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	replays := 0
	for _, e := range x.Events {
		if e.Type == idem.EventReplayed {
			replays++
		}
	}
	if replays != 3 {
		t.Errorf("%d execution.replayed events, want 3", replays)
	}

	// Near the end of retention the record comes from the store again.
	f.clock.Advance(24*time.Hour - 30*time.Second)
	before = store.gets.Load()
	again := f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"})
	expect(t, again, 201, "")
	if !again.Replayed || store.gets.Load() == before {
		t.Errorf("replay near retention's end: replayed=%v, store reads %d; want a replay read from the store", again.Replayed, store.gets.Load()-before)
	}
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", runs.Load())
	}
}

func TestReplayCacheCanBeTurnedOff(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, nil)
	store := &countingStore{Store: f.store}
	f = newFixtureOn(t, f.clock, store, []idem.Operation{createOp(&runs), showOp()}, func(c *pipeline.Config) { c.ReplayCacheBytes = -1 })
	expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}), 201, "")
	before := store.gets.Load()
	expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}), 201, "")
	if store.gets.Load() == before {
		t.Error("with the cache off, a replay did not read the store")
	}
	if err := f.runner.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}
