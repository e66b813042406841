package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/idem-run/idem"
)

var _ idem.Transactor = (*Store)(nil)

// Tx returns the transaction of a transactional operation's call on a
// sqlitestore (idem.Call.Transaction), for the handler to write through;
// nil when the call has none.
func Tx(call *idem.Call) *sql.Tx {
	tx, _ := call.Transaction().(*sql.Tx)
	return tx
}

// errAborted rolls back a transactional call whose handler failed; it
// never leaves the store.
var errAborted = errors.New("sqlitestore: transactional execution aborted")

// busyKeys holds the keys whose transactional call is queued for or
// running in this store's writer (an execution, or a request that will
// find the key's record there): a same-key request answers at once
// instead of waiting for the writer behind it, from the key's final
// record if it has one. The single writer makes
// this per-process set enough for one process; another process sharing
// the file waits for the file's lock instead (busy timeout).
type busyKeys struct {
	mu   sync.Mutex
	keys map[idem.ScopedKey]struct{}
}

// take marks k busy; false when it already is.
func (b *busyKeys) take(k idem.ScopedKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.keys[k]; ok {
		return false
	}
	if b.keys == nil {
		b.keys = map[idem.ScopedKey]struct{}{}
	}
	b.keys[k] = struct{}{}
	return true
}

func (b *busyKeys) release(k idem.ScopedKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.keys, k)
}

// Transact implements idem.Transactor. The execution is one call of the
// store's group commit: it holds the single writer while its handler runs
// (bounded by the handler's timeout, and by the shared transaction's bound
// of twice the busy timeout), and shares its commit with the writes queued
// meanwhile. Each call of a batch has its own savepoint, so an aborted
// execution rolls back alone.
func (s *Store) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	if p.Key != "" {
		k := idem.ScopedKey{Scope: p.Scope, Key: p.Key}
		if !s.busy.take(k) {
			// Another execution of the key is in the writer. A committed
			// record answers (that execution only reads it); none means
			// its reservation is not committed: busy.
			a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: p.Scope, Key: p.Key})
			switch {
			case err == nil:
				return idem.TransactResult{Attempt: a}, nil
			case errors.Is(err, idem.ErrNotFound):
				return idem.TransactResult{}, idem.ErrKeyBusy
			}
			return idem.TransactResult{}, err
		}
		defer s.busy.release(k)
	}
	var res idem.TransactResult
	err := s.write(ctx, "transact", func(ctx context.Context, tx txn, now time.Time) error {
		res = idem.TransactResult{}
		var fence int64
		start, forgotten := now, false
		final := p.Key != "" && p.ApprovalID == "" // the record is written once, at the end
		if final {
			a, live, gone, err := liveRecord(ctx, tx, p.Scope, p.Key, now)
			if err != nil || live {
				res.Attempt = a
				return err
			}
			forgotten = gone
		} else if p.Key != "" {
			r, err := reserveTx(ctx, tx, p, now)
			if err != nil || !r.Reserved {
				res.Attempt = r.Attempt
				return err
			}
			fence = r.Attempt.FencingToken
		} else if _, err := startExecution(ctx, tx, now, p.StartParams, ""); err != nil {
			return err
		}
		res.Reserved = true
		out, err := runSaved(ctx, tx, run)
		if err != nil {
			return err
		}
		if out.Abort {
			return errAborted
		}
		now = s.now() // the handler took time: the lease is checked against now
		if p.Key == "" {
			fin := out.Result.Finish
			fin.Org, fin.ExecutionID = p.Scope.Org, p.ExecutionID
			return finishExecution(ctx, tx, now, fin)
		}
		c := out.Result
		c.Scope, c.Key, c.FencingToken = p.Scope, p.Key, fence
		headers, err := json.Marshal(idem.FilterReplayedHeaders(c.Headers))
		if err != nil {
			return err
		}
		if !final {
			res.Attempt, err = completeTx(ctx, tx, c, headers, now)
			return err
		}
		if !now.Before(start.Add(p.Lease)) {
			return idem.ErrFenced // the lease passed while the handler ran
		}
		res.Attempt, err = insertFinalTx(ctx, tx, p, c, headers, forgotten, start, now)
		return err
	})
	switch {
	case errors.Is(err, errAborted), errors.Is(err, idem.ErrFenced):
		// Rolled back: the handler failed, or its lease passed meanwhile.
		return idem.TransactResult{Reserved: true}, nil
	case err != nil:
		return idem.TransactResult{}, err
	}
	res.Committed = res.Reserved
	return res, nil
}

// insertFinalTx stores c as the key's final record, with its finished
// execution and its events (execution.started first), in tx; forgotten
// says a record past retention is still there and goes first. start is
// when the execution began.
func insertFinalTx(ctx context.Context, tx txn, p idem.ReserveParams, c idem.CompleteParams, headers []byte, forgotten bool, start, now time.Time) (idem.Attempt, error) {
	if forgotten {
		if _, err := tx.ExecContext(ctx, `DELETE FROM idem_attempts WHERE org = ? AND principal = ? AND key = ?`,
			p.Scope.Org, p.Scope.Principal, p.Key); err != nil {
			return idem.Attempt{}, err
		}
	}
	var secretExpiresAt sql.NullInt64
	if c.SealedKeyID != "" {
		secretExpiresAt = nullMicros(now.Add(c.SecretWindow))
	}
	// The fencing token is the counter's next value; a trigger advances
	// the counter (migration 004).
	a, err := scanAttempt(tx.QueryRowContext(ctx, `INSERT INTO idem_attempts
		(org, principal, key, operation, fingerprint, state, execution_id, fencing_token, lease_expires_at,
			status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, (SELECT value + 1 FROM idem_counters WHERE name = 'fencing_token'), ?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING `+attemptColumns,
		p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint, idem.FinalState(c.Status), p.ExecutionID,
		micros(start.Add(p.Lease)), c.Status, string(headers), c.Body, nullString(c.SealedKeyID), micros(start), micros(now),
		micros(start.Add(p.Retention)), secretExpiresAt))
	if err != nil {
		return idem.Attempt{}, err
	}
	fin := c.Finish
	if _, err := tx.ExecContext(ctx, `INSERT INTO idem_executions
		(org, id, principal, operation, fingerprint, key, attempts, outcome, code, reinvocation_of, started_at, finished_at)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, `+previousExecutionSQL+`, ?10, ?11)`,
		p.Scope.Org, p.ExecutionID, p.Scope.Principal, p.Operation, p.Fingerprint, p.Key, fin.Attempts, fin.Outcome,
		nullString(string(fin.Code)), micros(start), micros(now)); err != nil {
		return idem.Attempt{}, err
	}
	events := make([]idem.AuditEvent, 0, 1+len(fin.Events))
	events = append(events, idem.AuditEvent{ExecutionID: p.ExecutionID, Type: idem.EventStarted, At: start, Attempt: 1})
	for _, ev := range fin.Events {
		ev.ExecutionID = p.ExecutionID
		events = append(events, ev)
	}
	if err := insertEvents(ctx, tx, now, p.Scope.Org, events); err != nil {
		return idem.Attempt{}, err
	}
	return a.Observe(now), nil
}

// runSaved calls run under a savepoint, rolled back to when it asks for
// Undo.
func runSaved(ctx context.Context, tx txn, run idem.TransactFunc) (idem.TxOutcome, error) {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT handler`); err != nil {
		return idem.TxOutcome{}, err
	}
	out := run(ctx, tx.Tx)
	if out.Abort {
		return out, nil // the whole call is rolled back
	}
	if out.Undo {
		if _, err := tx.ExecContext(ctx, `ROLLBACK TO handler`); err != nil {
			return idem.TxOutcome{}, err
		}
	}
	_, err := tx.ExecContext(ctx, `RELEASE handler`)
	return out, err
}

// isolate is the group commit's savepoint per call (groupcommit.Isolate):
// a call that fails is rolled back alone, and nobody's function runs twice.
func isolate(ctx context.Context, tx txn, fn func() error) (fnErr, err error) {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT call`); err != nil {
		return nil, err
	}
	if fnErr := fn(); fnErr != nil {
		if _, err := tx.ExecContext(ctx, `ROLLBACK TO call`); err != nil {
			return fnErr, err
		}
		_, err := tx.ExecContext(ctx, `RELEASE call`)
		return fnErr, err
	}
	_, err = tx.ExecContext(ctx, `RELEASE call`)
	return nil, err
}
