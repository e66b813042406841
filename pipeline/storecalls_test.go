package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
)

// callsStore counts the store calls of the request path.
type callsStore struct {
	idem.Store
	gets, reserves, transacts atomic.Int64
}

func (s *callsStore) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	s.gets.Add(1)
	return s.Store.GetAttempt(ctx, p)
}

func (s *callsStore) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	s.reserves.Add(1)
	return s.Store.Reserve(ctx, p)
}

func (s *callsStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	s.transacts.Add(1)
	return s.Store.(idem.Transactor).Transact(ctx, p, run)
}

func (s *callsStore) take() [3]int64 {
	return [3]int64{s.gets.Swap(0), s.reserves.Swap(0), s.transacts.Swap(0)}
}

// Stage 5's read is left to the reservation when no policy or approval
// stands between them (issue 36 item 2): a keyed first execution is one
// store call to reserve (Transact, or Reserve), none to read the key
// first, and a replay the store serves (the replay cache off) is answered
// from what the reservation found. With a policy, stage 5 reads the key
// first, as SPEC §5 orders. Counts are [GetAttempt, Reserve, Transact].
func TestStage5FoldedIntoTheReservation(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		clock := fakeclock.New(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
		store := &callsStore{Store: env.store(t, clock)}
		var runs atomic.Int64
		noCache := func(c *pipeline.Config) { c.ReplayCacheBytes = -1 }
		f := newFixtureOn(t, clock, store, []idem.Operation{txCreateOp(nil, nil), showOp()}, noCache)
		check := func(what string, want [3]int64) {
			t.Helper()
			if got := store.take(); got != want {
				t.Errorf("%s: store calls [get, reserve, transact] = %v, want %v", what, got, want)
			}
		}
		first := expect(t, f.do(t.Context(), txCall("a", "", "k1")), 201, "")
		check("transactional first execution", [3]int64{0, 0, 1})
		again := f.do(t.Context(), txCall("a", "", "k1"))
		if d := expect(t, again, 201, ""); !again.Replayed || d.Meta.ExecutionID != first.Meta.ExecutionID {
			t.Fatalf("replay = %s", again.Body())
		}
		check("transactional replay", [3]int64{0, 0, 1})
		expect(t, f.do(t.Context(), txCall("b", "", "k1")), 422, idem.CodeIdempotencyKeyReused)
		check("transactional key reuse", [3]int64{0, 0, 1})

		two := newFixtureOn(t, clock, store, []idem.Operation{createOp(&runs), showOp()}, noCache)
		expect(t, two.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k2"}), 201, "")
		check("two-phase first execution", [3]int64{0, 1, 0})
		if r := two.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k2"}); !r.Replayed {
			t.Fatalf("two-phase replay = %s", r.Body())
		}
		check("two-phase replay", [3]int64{0, 1, 0})

		allow := idem.Policy{Name: "allow", Evaluate: func(context.Context, idem.PolicyInput) (idem.PolicyDecision, error) {
			return idem.PolicyDecision{Effect: idem.Allow}, nil
		}}
		gated := newFixtureOn(t, clock, store, []idem.Operation{txCreateOp(nil, nil), showOp()}, noCache,
			func(c *pipeline.Config) { c.Policies = []idem.Policy{allow} })
		expect(t, gated.do(t.Context(), txCall("c", "", "k3")), 201, "")
		check("with a policy, first execution", [3]int64{1, 0, 1})
		if r := gated.do(t.Context(), txCall("c", "", "k3")); !r.Replayed {
			t.Fatalf("replay with a policy = %s", r.Body())
		}
		check("with a policy, replay", [3]int64{1, 0, 0})
		if runs.Load() != 1 {
			t.Errorf("the two-phase handler ran %d times, want 1", runs.Load())
		}
	})
}

// A call refused admission (every execution place taken) whose key has a
// record answers from the record, as stage 5 would have before admission,
// though stage 5's read was left to the reservation.
func TestAdmissionRefusalStillReplays(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	entered, release := make(chan struct{}), make(chan struct{})
	f := newFixtureOn(t, clock, newSQLiteStore(t, clock), []idem.Operation{txCreateOp(entered, release), showOp()}, func(c *pipeline.Config) {
		c.ReplayCacheBytes, c.MaxExecutions, c.AdmissionWait = -1, 1, time.Millisecond
	})
	first := expect(t, f.do(t.Context(), txCall("a", "", "k1")), 201, "")
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { f.do(context.Background(), txCall("busy", "block", "k-busy")) })
	<-entered // the one execution place is taken
	defer close(release)
	again := f.do(t.Context(), txCall("a", "", "k1"))
	if d := expect(t, again, 201, ""); !again.Replayed || d.Meta.ExecutionID != first.Meta.ExecutionID {
		t.Fatalf("replay while admission is full = %d %s", again.Status, again.Body())
	}
	expect(t, f.do(t.Context(), txCall("new", "", "k-new")), 429, idem.CodeRateLimited)
}

// A replay of a key whose record left the replay cache (evicted by its
// byte bound) reads the record (GetAttempt: a read) instead of leaving
// stage 5 to the reservation (a write transaction in SQLite's single
// writer, two round trips on PostgreSQL), and is counted a miss; a new
// key's first execution still makes the one reservation (issue 36).
// Counts are [GetAttempt, Reserve, Transact].
func TestEvictedKeyReplaysWithARead(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		clock := fakeclock.New(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
		store := &callsStore{Store: env.store(t, clock)}
		small := func(c *pipeline.Config) { c.ReplayCacheBytes = 32 << 10 }
		f := newFixtureOn(t, clock, store, []idem.Operation{txCreateOp(nil, nil), showOp()}, small)
		check := func(what string, want [3]int64) {
			t.Helper()
			if got := store.take(); got != want {
				t.Errorf("%s: store calls [get, reserve, transact] = %v, want %v", what, got, want)
			}
		}
		first := expect(t, f.do(t.Context(), txCall("a", "", "k0")), 201, "")
		for i := 1; i < 100; i++ { // more than the cache holds: k0 is evicted
			expect(t, f.do(t.Context(), txCall(fmt.Sprint("a", i), "", fmt.Sprint("k", i))), 201, "")
		}
		check("100 transactional first executions", [3]int64{0, 0, 100})
		hits0, misses0 := f.runner.ReplayCacheStats()
		again := f.do(t.Context(), txCall("a", "", "k0"))
		if d := expect(t, again, 201, ""); !again.Replayed || d.Meta.ExecutionID != first.Meta.ExecutionID {
			t.Fatalf("replay = %s", again.Body())
		}
		check("replay of an evicted key", [3]int64{1, 0, 0})
		if r := f.do(t.Context(), txCall("a", "", "k0")); !r.Replayed {
			t.Fatalf("second replay = %s", r.Body())
		}
		check("its second replay, from the cache", [3]int64{0, 0, 0})
		hits, misses := f.runner.ReplayCacheStats()
		if hits-hits0 != 1 || misses-misses0 != 1 {
			t.Errorf("replay cache hits, misses = %d, %d; want 1, 1", hits-hits0, misses-misses0)
		}
		expect(t, f.do(t.Context(), txCall("b", "", "k0")), 422, idem.CodeIdempotencyKeyReused)
		expect(t, f.do(t.Context(), txCall("new", "", "k-new")), 201, "")
		check("key reuse (from the cache), and a new key", [3]int64{0, 0, 1})
	})
}
