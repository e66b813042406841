package pipeline_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/internal/sqlitetest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
	"github.com/idem-run/idem/storetest"
)

// txEnv is a database on which transactional handlers write effects: its
// store instances, and the effects committed so far.
type txEnv struct {
	store   func(t *testing.T, clock idem.Clock) idem.Store
	effects func(t *testing.T) []string
}

// eachTxStore runs test on SQLite and on PostgreSQL (skipped when no
// server is configured), each on a fresh database.
func eachTxStore(t *testing.T, test func(t *testing.T, env txEnv)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "idem.db")
		test(t, txEnv{
			store: func(t *testing.T, clock idem.Clock) idem.Store {
				s, err := sqlitestore.Open(t.Context(), path, idem.StoreConfig{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			},
			effects: func(t *testing.T) []string { return sqlitetest.Effects(t, path) },
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		db := pgtest.EffectsDB(t, url)
		test(t, txEnv{
			store: func(t *testing.T, clock idem.Clock) idem.Store {
				s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			},
			effects: func(t *testing.T) []string { return storetest.EffectNames(t, db, nil) },
		})
	})
}

// writeEffect writes name through the call's transaction, whichever store
// gave it.
func writeEffect(ctx context.Context, call *idem.Call, name string) error {
	if tx := sqlitestore.Tx(call); tx != nil {
		return sqlitetest.Effect(ctx, tx, name)
	}
	if tx := pgstore.Tx(call); tx != nil {
		return pgtest.Effect(ctx, tx, name)
	}
	return errors.New("the call carries no transaction")
}

type txIn struct {
	Name string `json:"name"`
	// Fail: "" succeeds, "declared" is a declared 409, "internal" a 500,
	// "block" waits for the test's release, "block-internal" waits, then
	// fails as "internal" does.
	Fail string `json:"fail,omitempty"`
}

// txCreateOp is a transactional keyed create; release, when it is not
// nil, holds "block" calls until closed (entered is closed first).
func txCreateOp(entered, release chan struct{}) idem.Operation {
	m := createMeta()
	m.Retry.Transactional = true
	return idem.Define(m, func(ctx context.Context, call *idem.Call, in txIn) (thing, error) {
		if err := writeEffect(ctx, call, in.Name); err != nil {
			return thing{}, err
		}
		switch in.Fail {
		case "declared":
			return thing{}, idem.Errorf(codeThingExists, "a thing named %q exists", in.Name)
		case "internal":
			return thing{}, errors.New("the handler failed after its write")
		case "block", "block-internal":
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return thing{}, ctx.Err()
			}
			if in.Fail == "block-internal" {
				return thing{}, errors.New("the handler failed after its write")
			}
		}
		return thing{ID: "t_" + in.Name, Name: in.Name}, nil
	})
}

func txCall(name, fail, key string) call {
	return call{op: "thing.create", body: txIn{Name: name, Fail: fail}, key: key}
}

func TestTransactionalCommitsOnceAndReplays(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		{
			clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			f := newFixtureOn(t, clock, env.store(t, clock), []idem.Operation{txCreateOp(nil, nil), showOp()})
			first := f.do(t.Context(), txCall("a", "", "k1"))
			if first.Status != http.StatusCreated {
				t.Fatalf("first = %d %s", first.Status, first.Body())
			}
			again := f.do(t.Context(), txCall("a", "", "k1"))
			if again.Status != http.StatusCreated || !again.Replayed || !jsonEqual(decode(t, again).Data, decode(t, first).Data) {
				t.Fatalf("same key again = %d replayed=%v %s", again.Status, again.Replayed, again.Body())
			}
			if got := env.effects(t); len(got) != 1 || got[0] != "a" {
				t.Errorf("effects = %v, want [a]", got)
			}
		}
	})
}

func TestTransactionalFailureIsRetryableAndFreesTheKey(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		{
			clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			f := newFixtureOn(t, clock, env.store(t, clock), []idem.Operation{txCreateOp(nil, nil), showOp()})
			failed := f.do(t.Context(), txCall("b", "internal", "k1"))
			d := expect(t, failed, http.StatusInternalServerError, idem.CodeExecutionFailed)
			if !d.Retryable {
				t.Errorf("a rolled-back failure answers retryable: false; body %s", failed.Body())
			}
			if _, err := f.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "k1"}); !errors.Is(err, idem.ErrNotFound) {
				t.Errorf("record after a rolled-back failure: %v, want none", err)
			}
			if got := env.effects(t); len(got) != 0 {
				t.Fatalf("effects after a rolled-back failure = %v, want none", got)
			}
			// Its audit remains: the failed execution, without key.
			x, err := f.store.GetExecution(t.Context(), idem.GetExecutionParams{Org: "acme", ID: d.Meta.ExecutionID})
			if err != nil || x.Outcome != idem.OutcomeFailed || x.Code == nil || *x.Code != idem.CodeExecutionFailed {
				t.Errorf("audit of the failure = %+v, %v", x, err)
			}
			// The same key runs afresh.
			ok := f.do(t.Context(), txCall("b", "", "k1"))
			if ok.Status != http.StatusCreated || ok.Replayed {
				t.Fatalf("same key after the failure = %d replayed=%v %s", ok.Status, ok.Replayed, ok.Body())
			}
			if got := env.effects(t); len(got) != 1 {
				t.Errorf("effects = %v, want one", got)
			}
		}
	})
}

func TestTransactionalDeclaredErrorIsStoredWithoutItsWrites(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		{
			clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			f := newFixtureOn(t, clock, env.store(t, clock), []idem.Operation{txCreateOp(nil, nil), showOp()})
			expect(t, f.do(t.Context(), txCall("c", "declared", "k1")), http.StatusConflict, codeThingExists)
			again := f.do(t.Context(), txCall("c", "declared", "k1"))
			expect(t, again, http.StatusConflict, codeThingExists)
			if !again.Replayed {
				t.Error("the declared error was not replayed")
			}
			if got := env.effects(t); len(got) != 0 {
				t.Errorf("effects = %v, want none (the declared error rolls the handler's writes back)", got)
			}
		}
	})
}

func TestTransactionalSameKeyInFlightAnswersAtOnce(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		{
			clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			entered, release := make(chan struct{}), make(chan struct{})
			// Two runners on the store (on PostgreSQL, two store instances).
			s1 := env.store(t, clock)
			one := newFixtureOn(t, clock, s1, []idem.Operation{txCreateOp(entered, release), showOp()})
			two := newFixtureOn(t, clock, env.store(t, clock), []idem.Operation{txCreateOp(nil, nil), showOp()})
			var wg sync.WaitGroup
			var first idem.Result
			wg.Go(func() { first = one.do(context.Background(), txCall("d", "block", "k1")) })
			<-entered
			for _, f := range []*fixture{one, two} {
				if strings.HasSuffix(t.Name(), "/sqlite") && f == two {
					continue // another store instance on the file waits for the writer
				}
				expect(t, f.do(t.Context(), txCall("d", "block", "k1")), http.StatusConflict, idem.CodeIdempotencyKeyInFlight)
			}
			// Prefer: wait waits for the commit and replays it: released only
			// once the waiter has read the record twice (stage 5, then a
			// poll of its wait), so that it provably waited.
			polled := &pollingStore{Store: s1, reads: make(chan struct{}, 64)}
			waiter := newFixtureOn(t, clock, polled, []idem.Operation{txCreateOp(nil, nil), showOp()})
			waited := make(chan idem.Result, 1)
			go func() {
				c := txCall("d", "block", "k1")
				c.wait = 10 * time.Second
				waited <- waiter.do(context.Background(), c)
			}()
			<-polled.reads
			<-polled.reads
			close(release)
			wg.Wait()
			if first.Status != http.StatusCreated {
				t.Fatalf("first = %d %s", first.Status, first.Body())
			}
			w := <-waited
			if w.Status != http.StatusCreated || !w.Replayed || w.WaitApplied == 0 {
				t.Errorf("waiter = %d replayed=%v waited %s %s", w.Status, w.Replayed, w.WaitApplied, w.Body())
			}
			if got := env.effects(t); len(got) != 1 {
				t.Errorf("effects = %v, want one", got)
			}
		}
	})
}

// pollingStore reports each attempt read of its store (a Transactor) on
// reads.
type pollingStore struct {
	idem.Store
	reads chan struct{}
}

func (s *pollingStore) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	a, err := s.Store.GetAttempt(ctx, p)
	s.reads <- struct{}{}
	return a, err
}

func (s *pollingStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return s.Store.(idem.Transactor).Transact(ctx, p, run)
}

// A Prefer: wait behind a transactional execution of the same key on this
// instance is answered as soon as that execution ends without committing
// (the key is free again), not when the wait runs out (issue 28, item 7).
func TestTransactionalWaiterAnswersWhenTheAheadRollsBack(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
		entered, release := make(chan struct{}), make(chan struct{})
		f := newFixtureOn(t, clock, env.store(t, clock), []idem.Operation{txCreateOp(entered, release), showOp()})
		var wg sync.WaitGroup
		var first idem.Result
		wg.Go(func() { first = f.do(context.Background(), txCall("w", "block-internal", "k1")) })
		<-entered
		answered := make(chan idem.Result, 1)
		go func() {
			c := txCall("w", "block-internal", "k1")
			c.wait = 20 * time.Second
			answered <- f.do(context.Background(), c)
		}()
		time.Sleep(100 * time.Millisecond) // the second call is waiting
		close(release)
		wg.Wait()
		expect(t, first, http.StatusInternalServerError, idem.CodeExecutionFailed)
		select {
		case waiter := <-answered:
			d := expect(t, waiter, http.StatusConflict, idem.CodeIdempotencyKeyInFlight)
			if !d.Retryable || !strings.Contains(string(waiter.Body()), "committed nothing") {
				t.Errorf("the waiter's answer = %s; want a retryable in-flight answer saying the key is free", waiter.Body())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not answered within 10 s of a 20 s wait, after the execution ahead rolled back")
		}
	})
}

func TestTransactionalCancellationRollsBack(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		{
			clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			entered, release := make(chan struct{}), make(chan struct{})
			defer close(release)
			f := newFixtureOn(t, clock, env.store(t, clock), []idem.Operation{txCreateOp(entered, release), showOp()})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan idem.Result, 1)
			go func() { done <- f.do(ctx, txCall("e", "block", "k1")) }()
			<-entered
			cancel()
			d := expect(t, <-done, idem.StatusClientClosedRequest, idem.CodeCancelled)
			if !d.Retryable {
				t.Error("a cancelled transactional call answers retryable: false")
			}
			if got := env.effects(t); len(got) != 0 {
				t.Errorf("effects = %v, want none", got)
			}
			if _, err := f.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "k1"}); !errors.Is(err, idem.ErrNotFound) {
				t.Errorf("record after a cancellation: %v, want none", err)
			}
		}
	})
}

func TestTransactionalNeedsATransactor(t *testing.T) {
	reg, err := idem.NewRegistry(txCreateOp(nil, nil), showOp())
	if err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	store := struct{ idem.Store }{newSQLiteStore(t, clock)} // hides Transact
	if _, err := pipeline.New(reg, pipeline.Config{Store: store, Clock: clock}); err == nil {
		t.Fatal("New accepted a transactional operation on a store that cannot run it")
	}
}

// feedReads is a pgstore that signals each read of a key's record (a
// waiter's polls), keeping its completion feed.
type feedReads struct {
	*pgstore.Store
	reads chan struct{}
}

func (s *feedReads) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	a, err := s.Store.GetAttempt(ctx, p)
	select {
	case s.reads <- struct{}{}:
	default:
	}
	return a, err
}

// A Prefer: wait on one instance behind a transactional execution of the
// same key that rolls back on another instance is answered once the
// rollback is signalled (the key is free), not when its wait runs out:
// the rollback's NOTIFY, sent after the aborted transaction, reaches the
// waiter's feed (issue 33 item 7). Before, the waiter could not tell a
// rolled-back execution from an uncommitted one and polled to its cap,
// then answered "still running".
func TestTransactionalWaiterOnAnotherInstanceAnswersWhenTheAheadRollsBack(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pgtest.EffectsDB(t, url) // the handler's table
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	open := func() *pgstore.Store {
		s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	sa, sb := open(), &feedReads{Store: open(), reads: make(chan struct{}, 1)}
	entered, release := make(chan struct{}), make(chan struct{})
	ops := []idem.Operation{txCreateOp(entered, release), showOp()}
	fa, fb := newFixtureOn(t, clock, sa, ops), newFixtureOn(t, clock, sb, ops)
	if err := fb.runner.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.runner.Stop(context.Background()) })
	// The LISTEN of B's feed starts in the background; B's runner and this
	// probe share its one connection. Complete watched records on A until
	// one reaches the probe: B's runner is listening then too.
	probe := sb.Completions(t.Context())
	scope := agent.Scope()
	for i := 0; ; i++ {
		key := "probe-" + strconv.Itoa(i)
		res, err := sa.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "thing.show", Fingerprint: "f"},
			Key:         key, Lease: time.Minute, Retention: time.Hour,
		})
		if err != nil || !res.Reserved {
			t.Fatalf("reserve: %v %v", res.Reserved, err)
		}
		if err := sb.Watch(t.Context(), scope, key); err != nil {
			t.Fatal(err)
		}
		if _, err := sa.Complete(t.Context(), idem.CompleteParams{Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken, Status: 200,
			Body: []byte(`{}`), Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-probe:
		case <-time.After(100 * time.Millisecond):
			if i == 200 {
				t.Fatal("B's completion feed heard nothing in 20 s")
			}
			continue
		}
		break
	}

	var wg sync.WaitGroup
	var first idem.Result
	wg.Go(func() { first = fa.do(context.Background(), txCall("w", "block-internal", "k1")) })
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-entered:
	case <-ended:
		t.Fatalf("the first call ended before its handler blocked: %d %s", first.Status, first.Body())
	}
	answered := make(chan idem.Result, 1)
	began := time.Now()
	go func() {
		c := txCall("w", "block-internal", "k1")
		c.wait = 10 * time.Second // the cap
		answered <- fb.do(context.Background(), c)
	}()
	// B read the key (stage 5), found it busy and polls it: two reads.
	<-sb.reads
	<-sb.reads
	close(release)
	wg.Wait()
	expect(t, first, http.StatusInternalServerError, idem.CodeExecutionFailed)
	waiter := <-answered
	took := time.Since(began)
	d := expect(t, waiter, http.StatusConflict, idem.CodeIdempotencyKeyInFlight)
	if !d.Retryable || !strings.Contains(string(waiter.Body()), "committed nothing") {
		t.Fatalf("the waiter's answer after %v = %s; want a retryable in-flight answer saying the key is free", took, waiter.Body())
	}
	t.Logf("figures: the waiter on B was answered %v after it began waiting (the execution ahead on A rolled back)", took)
}
