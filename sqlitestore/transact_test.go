package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// A same-key request that only reads the key's completed record holds the
// key busy while it waits for the writer; another same-key request
// meanwhile answers from the record too, not busy (409
// IDEMPOTENCY_KEY_IN_FLIGHT for a record that is completed).
func TestTransactBesideAReaderAnswersFromTheRecord(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
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
	// Hold "done" (completed) and "open" (no record) busy, as a queued
	// reader and a queued execution would.
	for _, key := range []string{"done", "open"} {
		k := idem.ScopedKey{Scope: scope, Key: key}
		s.busy.take(k)
		defer s.busy.release(k)
	}
	ran := func(context.Context, any) idem.TxOutcome {
		t.Error("the function ran while another call held the key")
		return idem.TxOutcome{Abort: true}
	}
	res, err := s.Transact(t.Context(), params("done", "exe_2"), ran)
	if err != nil || res.Reserved || res.Attempt.ExecutionID != "exe_1" || res.Attempt.State != idem.AttemptCompleted {
		t.Errorf("Transact of a completed key held busy = %+v, %v; want the completed record", res, err)
	}
	if _, err := s.Transact(t.Context(), params("open", "exe_3"), ran); !errors.Is(err, idem.ErrKeyBusy) {
		t.Errorf("Transact of a key without record held busy: %v, want ErrKeyBusy", err)
	}
}

// A transactional first execution reads none of a record it does not
// find: its probe of the key selects one column, not attemptColumns,
// whose names and types the driver reads on every query (issue 36: about
// 50 of a first execution's 429 allocations); and it runs no savepoint
// (a business error's Undo writes the call's part again instead). A key
// with a record is read whole, and answers it.
func TestTransactFirstExecutionProbesTheKey(t *testing.T) {
	s, taken := traced(t)
	ctx := t.Context()
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	p := idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: "exe_1", Scope: scope, Operation: "op", Fingerprint: "fp"},
		Key: "k1", Lease: time.Minute, Retention: time.Hour}
	run := func(context.Context, any) idem.TxOutcome {
		return idem.TxOutcome{Result: idem.CompleteParams{Status: 201, Body: []byte(`{}`),
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}}
	}
	taken()
	if res, err := s.Transact(ctx, p, run); err != nil || !res.Committed {
		t.Fatalf("first: %+v, %v", res, err)
	}
	for _, st := range taken() {
		if strings.Contains(st.q, attemptColumns) {
			t.Errorf("a first execution read the key's whole record:\n%s", st.q)
		}
		if savepoint.MatchString(st.q) {
			t.Errorf("a first execution, alone in its transaction, ran %s", st.q)
		}
	}
	p.ExecutionID = "exe_2"
	res, err := s.Transact(ctx, p, run)
	if err != nil || res.Reserved || res.Attempt.ExecutionID != "exe_1" || res.Attempt.Status != 201 {
		t.Fatalf("second: %+v, %v; want the first's record", res, err)
	}
}

// A handler's statement run through ExecContext on its transaction (a
// transactional call's, or Write's) is prepared once by the store and
// reused, where tx.ExecContext has the driver prepare it on every call
// (issue 36: the demo's INSERT, a twentieth of a first execution's CPU);
// on another transaction ExecContext is tx.ExecContext.
func TestHandlerStatementsArePreparedOnce(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	const create = `CREATE TABLE app_things (id TEXT PRIMARY KEY) STRICT`
	const insert = `INSERT INTO app_things (id) VALUES (?)`
	if err := s.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ExecContext(ctx, tx, create)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	for i := range 3 {
		key := fmt.Sprint("k", i)
		p := idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "op", Fingerprint: "fp"},
			Key: key, Lease: time.Minute, Retention: time.Hour}
		res, err := s.Transact(ctx, p, func(ctx context.Context, tx any) idem.TxOutcome {
			if _, err := ExecContext(ctx, tx.(*sql.Tx), insert, key); err != nil {
				t.Error(err)
				return idem.TxOutcome{Abort: true}
			}
			return idem.TxOutcome{Result: idem.CompleteParams{Status: 201, Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}}
		})
		if err != nil || !res.Committed {
			t.Fatalf("Transact %d: %+v, %v", i, res, err)
		}
	}
	s.wstmts.mu.RLock()
	_, prepared := s.wstmts.ready[insert]
	s.wstmts.mu.RUnlock()
	if !prepared {
		t.Error("the handler's INSERT is not among the writer's prepared statements")
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM app_things`).Scan(&n); err != nil || n != 3 {
		t.Errorf("app_things holds %d rows (%v), want 3", n, err)
	}
	// Outside a store's transaction: the transaction's own ExecContext.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := QueryRowContext(ctx, tx, `SELECT count(*) FROM app_things`).Scan(&n); err != nil || n != 3 {
		t.Errorf("read outside a store transaction: %d, %v", n, err)
	}
}
