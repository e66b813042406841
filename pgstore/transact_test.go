package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/storetest"
)

// A same-key request that only reads the key's completed record holds the
// key's advisory lock for a moment, in its own transaction; another
// same-key request meanwhile answers from the record too, not busy (409
// IDEMPOTENCY_KEY_IN_FLIGHT for a record that is completed). Found by the
// linearizability checker (linearize, two servers).
func TestTransactBesideAReaderAnswersFromTheRecord(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	params := func(key, exe string) idem.ReserveParams {
		return idem.ReserveParams{
			StartParams: idem.StartParams{Scope: scope, ExecutionID: exe, Operation: "thing.create", Fingerprint: "fp"},
			Key:         key, Lease: idem.DefaultTimeout, Retention: 24 * time.Hour,
		}
	}
	committed := func(context.Context, any) idem.TxOutcome {
		return idem.TxOutcome{Result: idem.CompleteParams{Status: http.StatusCreated, Body: []byte(`{"data":{}}`),
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}}
	}
	if res, err := s.Transact(t.Context(), params("done", "exe_1"), committed); err != nil || !res.Committed {
		t.Fatalf("Transact = %+v, %v", res, err)
	}
	// Hold the locks of "done" (completed) and "open" (no record), as the
	// transactions of a reader and of an execution would.
	tx, err := sqlDB(t, url).BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, key := range []string{"done", "open"} {
		if _, err := tx.Exec(`SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, $4))`,
			scope.Org, scope.Principal, key, pgstore.KeyLockSeed); err != nil {
			t.Fatal(err)
		}
	}
	ran := func(context.Context, any) idem.TxOutcome {
		t.Error("the function ran while another transaction held the key")
		return idem.TxOutcome{Abort: true}
	}
	res, err := s.Transact(t.Context(), params("done", "exe_2"), ran)
	if err != nil || res.Reserved || res.Attempt.ExecutionID != "exe_1" || res.Attempt.State != idem.AttemptCompleted {
		t.Errorf("Transact of a completed key whose lock is held = %+v, %v; want the completed record", res, err)
	}
	if _, err := s.Transact(t.Context(), params("open", "exe_3"), ran); !errors.Is(err, idem.ErrKeyBusy) {
		t.Errorf("Transact of a key without record whose lock is held: %v, want ErrKeyBusy", err)
	}
}

// An executor paused inside its transactional execution past the lease
// (its handler idle, its session idle in the transaction): PostgreSQL ends
// the session at the lease, which rolls back its writes and frees the key
// for another instance meanwhile; the paused executor's late completion
// fails and commits nothing.
func TestPausedTransactionalExecutorFreesItsKeyAtTheLease(t *testing.T) {
	url := pgtest.NewDatabase(t)
	effects := pgtest.EffectsDB(t, url)
	open := func() *pgstore.Store {
		s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	paused, other := open(), open()
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	params := func(exe string) idem.ReserveParams {
		return idem.ReserveParams{
			StartParams: idem.StartParams{Scope: scope, ExecutionID: exe, Operation: "thing.create", Fingerprint: "fp"},
			Key:         "k", Lease: 500 * time.Millisecond, Retention: 24 * time.Hour,
		}
	}
	entered := make(chan struct{})
	write := func(name string) idem.TransactFunc {
		return func(ctx context.Context, tx any) idem.TxOutcome {
			if err := pgtest.Effect(ctx, tx, name); err != nil {
				return idem.TxOutcome{Abort: true}
			}
			if name == "paused" {
				close(entered)
				time.Sleep(2 * time.Second) // paused, past the lease
			}
			return idem.TxOutcome{Result: idem.CompleteParams{Status: http.StatusCreated, Body: []byte(`{"data":{}}`),
				Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1,
					Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}}
		}
	}
	done := make(chan error, 1)
	go func() {
		res, err := paused.Transact(context.Background(), params("exe_paused"), write("paused"))
		if err == nil && res.Committed {
			err = errors.New("the paused execution committed")
		} else {
			err = nil
		}
		done <- err
	}()
	<-entered
	// While the paused one holds the key, the other instance is answered
	// busy; once the lease has passed, it takes the key.
	var res idem.TransactResult
	var err error
	busy := 0
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if res, err = other.Transact(t.Context(), params("exe_other"), write("other")); !errors.Is(err, idem.ErrKeyBusy) {
			break
		}
		busy++
	}
	if busy == 0 {
		t.Error("the other instance was never answered busy while the paused execution held the key")
	}
	if err != nil || !res.Committed {
		t.Fatalf("Transact on another instance after the lease = %+v, %v; want it committed", res, err)
	}
	select {
	case <-done:
		t.Fatal("the key was freed only once the paused executor resumed, not at its lease")
	default: // still paused: PostgreSQL ended its session at the lease
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := storetest.EffectNames(t, effects, nil); len(got) != 1 || got[0] != "other" {
		t.Fatalf("effects = %v, want only the other instance's", got)
	}
	a, err := other.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k"})
	if err != nil || a.ExecutionID != "exe_other" {
		t.Fatalf("record = %+v, %v; want the other instance's", a, err)
	}
}

// A transactional execution reads the key and tries its lock in one
// statement, whose snapshot predates the try: a holder that commits in
// between is not seen. Its record then meets the holder's in the unique
// index on held keys at the end, and the key is answered busy, with
// nothing of the execution (its handler's writes included) committed.
func TestTransactMeetingAHolderCommittedMeanwhileIsBusy(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	pool := newPool(t, url)
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	params := idem.ReserveParams{
		StartParams: idem.StartParams{Scope: scope, ExecutionID: "exe_raced", Operation: "thing.create", Fingerprint: "fp"},
		Key:         "raced", Lease: idem.DefaultTimeout, Retention: 24 * time.Hour,
	}
	// The holder's record commits while the execution's handler runs,
	// after its read: as if it had committed between that read's snapshot
	// and its lock (the holder's own lock went with its transaction).
	racing := func(ctx context.Context, tx any) idem.TxOutcome {
		if _, err := pool.Exec(ctx, `INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state,
				fencing_token, lease_expires_at, expires_at, attempts, outcome, started_at, events)
			VALUES ('acme', 'exe_holder', 'agent-1', 'thing.create', 'fp', 'raced', true, 'in_flight', 1,
				now() + interval '1 minute', now() + interval '1 day', 1, 'running', now(), '[]')`); err != nil {
			t.Errorf("the holder's record: %v", err)
		}
		return idem.TxOutcome{Result: idem.CompleteParams{Status: http.StatusCreated, Body: []byte(`{"data":{}}`),
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}}
	}
	res, err := s.Transact(t.Context(), params, racing)
	if !errors.Is(err, idem.ErrKeyBusy) || res.Committed {
		t.Fatalf("Transact beside a holder committed meanwhile = %+v, %v; want ErrKeyBusy", res, err)
	}
	a, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "raced"})
	if err != nil || a.ExecutionID != "exe_holder" {
		t.Fatalf("the key's record = %+v, %v; want the holder's", a, err)
	}
	if _, err := s.GetExecution(t.Context(), idem.GetExecutionParams{Org: scope.Org, ID: "exe_raced"}); idem.ErrorCode(err) != idem.CodeNotFound {
		t.Fatalf("the busy execution was stored: %v", err)
	}
}
