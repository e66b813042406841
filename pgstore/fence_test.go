package pgstore_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// fenceEnv is one database with a store whose clock is the real one
// (reservations, fence checks inside their lease) and a reader's store
// whose clock is an hour ahead (it finds every lease passed), and an
// application table for effects.
type fenceEnv struct {
	owner, reader *pgstore.Store
	db            *sql.DB
	url           string
}

func newFenceEnv(t *testing.T) fenceEnv {
	url := pgtest.NewDatabase(t)
	e := fenceEnv{
		owner:  openStore(t, url, fakeclock.New(time.Now())),
		reader: openStore(t, url, fakeclock.New(time.Now().Add(time.Hour))),
		db:     sqlDB(t, url),
		url:    url,
	}
	if _, err := e.db.ExecContext(t.Context(), `CREATE TABLE effects (key text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e fenceEnv) reserve(t *testing.T, key string) idem.Fence {
	t.Helper()
	res, err := e.owner.Reserve(t.Context(), reserveFor(key, 24*time.Hour))
	if err != nil || !res.Reserved {
		t.Fatalf("Reserve(%s) = %+v, %v", key, res, err)
	}
	return idem.Fence{Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken}
}

func (e fenceEnv) effects(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRowContext(t.Context(), `SELECT count(*) FROM effects WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdFence begins an effect transaction that passes f's fence check and
// so holds the record; it is rolled back at the end of the test unless
// committed.
func (e fenceEnv) holdFence(t *testing.T, f idem.Fence) *sql.Tx {
	t.Helper()
	tx, err := e.db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if err := pgstore.CheckFence(t.Context(), tx, f, time.Second); err != nil {
		t.Fatalf("fence check inside the lease: %v", err)
	}
	return tx
}

// waitForLockWait polls, with a bound, until a backend of the database
// waits for a lock in the UPDATE that marks a record indeterminate.
func waitForLockWait(t *testing.T, url string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminConn(t)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND wait_event_type = 'Lock'
				AND query LIKE 'UPDATE idem_records SET state = ''indeterminate''%'`, cfg.Database).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatal("no reader waited for the fenced effect's lock within 10 s")
		}
	}
}

type attemptResult struct {
	a   idem.Attempt
	err error
}

// An effect transaction that passed its fence check holds the record: a
// reader that finds the lease passed waits for it before it marks the
// record indeterminate, and by then the effect is committed, so a
// reconcile read after "indeterminate" sees it.
func TestFencedEffectMakesMarkingWait(t *testing.T) {
	e := newFenceEnv(t)
	pgstore.SetSettleWait(e.reader, time.Minute) // the wait is bounded by the test, not the store
	f := e.reserve(t, "k-wait")
	tx := e.holdFence(t, f)
	got := make(chan attemptResult, 1)
	go func() {
		a, err := e.reader.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k-wait"})
		got <- attemptResult{a, err}
	}()
	waitForLockWait(t, e.url)
	select {
	case r := <-got:
		t.Fatalf("the reader answered while the effect held the fence: %+v, %v", r.a, r.err)
	default:
	}
	if _, err := tx.ExecContext(t.Context(), `INSERT INTO effects VALUES ('k-wait')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var r attemptResult
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the reader did not answer within 30 s of the effect's commit")
	}
	if r.err != nil || r.a.State != idem.AttemptIndeterminate {
		t.Fatalf("reader after the effect committed = %+v, %v; want indeterminate", r.a, r.err)
	}
	if n := e.effects(t, "k-wait"); n != 1 {
		t.Fatalf("%d effects visible once the record reads indeterminate, want 1", n)
	}
}

// A reader that marks the record first makes the effect's fence check
// fail: the effect never commits.
func TestMarkingFirstFencesTheEffect(t *testing.T) {
	e := newFenceEnv(t)
	f := e.reserve(t, "k-first")
	if a, err := e.reader.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k-first"}); err != nil || a.State != idem.AttemptIndeterminate {
		t.Fatalf("reader past the lease = %+v, %v", a, err)
	}
	err := inEffectTx(t, e.db, func(tx *sql.Tx) error {
		if err := pgstore.CheckFence(t.Context(), tx, f, time.Second); err != nil {
			return err
		}
		_, err := tx.ExecContext(t.Context(), `INSERT INTO effects VALUES ('k-first')`)
		return err
	})
	if !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("effect after the record was marked: err = %v, want ErrFenced", err)
	}
	if n := e.effects(t, "k-first"); n != 0 {
		t.Fatalf("%d effects committed after the record read indeterminate", n)
	}
}

// While an effect holds the fence longer than the reader's bound, the
// record answers as still in flight (honest and retryable), and then as
// indeterminate once the effect is done.
func TestMarkingGivesUpWhileEffectHoldsFence(t *testing.T) {
	e := newFenceEnv(t)
	pgstore.SetSettleWait(e.reader, 50*time.Millisecond)
	f := e.reserve(t, "k-busy")
	tx := e.holdFence(t, f)
	if a, err := e.reader.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k-busy"}); err != nil || a.State != idem.AttemptInFlight {
		t.Fatalf("reader while the effect holds the fence = %+v, %v; want in flight", a, err)
	}
	if res, err := e.reader.Reserve(t.Context(), reserveFor("k-busy", 24*time.Hour)); err != nil || res.Reserved || res.Attempt.State != idem.AttemptInFlight {
		t.Fatalf("Reserve while the effect holds the fence = %+v, %v; want the record, in flight", res, err)
	}
	if _, err := tx.ExecContext(t.Context(), `INSERT INTO effects VALUES ('k-busy')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if a, err := e.reader.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k-busy"}); err != nil || a.State != idem.AttemptIndeterminate {
		t.Fatalf("reader after the effect = %+v, %v; want indeterminate", a, err)
	}
	if n := e.effects(t, "k-busy"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// An executor paused inside its fenced transaction does not hold the key
// forever: PostgreSQL ends the idle transaction after FenceIdleTimeout,
// the effect rolls back, and a reader then marks the record indeterminate.
func TestIdleFencedTransactionIsEnded(t *testing.T) {
	defer pgstore.SetFenceIdleTimeout(200 * time.Millisecond)()
	e := newFenceEnv(t)
	pgstore.SetSettleWait(e.reader, 50*time.Millisecond)
	f := e.reserve(t, "k-idle")
	tx := e.holdFence(t, f)
	if _, err := tx.ExecContext(t.Context(), `INSERT INTO effects VALUES ('k-idle')`); err != nil {
		t.Fatal(err)
	}
	// The executor pauses here. Poll, bounded, until the reader is no
	// longer held off by the fence.
	var a idem.Attempt
	var err error
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if a, err = e.reader.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k-idle"}); err != nil {
			t.Fatal(err)
		}
		if a.State != idem.AttemptInFlight {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the idle fenced transaction still held the record after 30 s")
		}
	}
	if a.State != idem.AttemptIndeterminate {
		t.Fatalf("record after the idle transaction ended = %s, want indeterminate", a.State)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("the paused executor's commit succeeded after PostgreSQL ended its transaction")
	}
	if n := e.effects(t, "k-idle"); n != 0 {
		t.Fatalf("%d effects committed by the ended transaction", n)
	}
}
