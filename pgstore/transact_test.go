package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"idem"
	"idem/internal/pgtest"
	"idem/pgstore"
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
