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

// handlerStmts maps the transaction a handler runs in (Transact's, or
// Write's) to the writer's prepared statements while it runs: at most one
// entry per write in flight (one writer).
var handlerStmts sync.Map // *sql.Tx → *stmtCache

// lend gives fn tx's prepared statements (ExecContext), for as long as it
// runs.
func lend[T any](tx txn, fn func(*sql.Tx) T) T {
	handlerStmts.Store(tx.Tx, tx.stmts)
	defer handlerStmts.Delete(tx.Tx)
	return fn(tx.Tx)
}

// ExecContext runs q in tx, the transaction a handler was given (Tx, or
// Write's function), through the store's statement prepared for q: the
// store prepares every statement it sees once (a statement seen the first
// time runs unprepared), where database/sql's tx.ExecContext has the
// driver prepare and finalize it on every call, a fifth of a small
// statement's cost. On any other transaction it is tx.ExecContext.
func ExecContext(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if c, ok := handlerStmts.Load(tx); ok {
		return txn{tx, c.(*stmtCache)}.ExecContext(ctx, q, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

// QueryContext is ExecContext for a query.
func QueryContext(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if c, ok := handlerStmts.Load(tx); ok {
		return txn{tx, c.(*stmtCache)}.QueryContext(ctx, q, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

// QueryRowContext is ExecContext for a query of one row.
func QueryRowContext(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if c, ok := handlerStmts.Load(tx); ok {
		return txn{tx, c.(*stmtCache)}.QueryRowContext(ctx, q, args...)
	}
	return tx.QueryRowContext(ctx, q, args...)
}

// errAborted rolls back a transactional call whose handler failed; it
// never leaves the store.
var errAborted = errors.New("sqlitestore: transactional execution aborted")

// errUndone rolls back a transactional call whose handler asked for Undo;
// it never leaves the store.
var errUndone = errors.New("sqlitestore: transactional execution undone")

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
// execution rolls back alone. The handler has none of its own: a business
// error (Undo) rolls the call back and writes its own part again in a
// second transaction, so that the common path runs no savepoint.
//
// The execution's row is written once, final, at the end (insertFinalTx):
// at the start the call only reads the key's record (the single writer
// holds the key) and consumes the approval, if any; nobody can see an
// uncommitted row anyway.
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
	var (
		res   idem.TransactResult
		start time.Time
		out   idem.TxOutcome // the handler's, once it ran
	)
	err := s.write(ctx, "transact", func(ctx context.Context, tx txn, now time.Time) error {
		start = now
		forgotten, err := s.open(ctx, tx, p, &res, start)
		if err != nil || !res.Reserved {
			return err
		}
		out = lend(tx, func(htx *sql.Tx) idem.TxOutcome { return run(ctx, htx) })
		if out.Abort {
			return errAborted
		}
		if out.Undo {
			// No savepoint on the common path: a business error rolls
			// the call back, the handler's writes with it, and its own
			// part is written again below, in a transaction of its own.
			return errUndone
		}
		res.Attempt, err = s.closeTx(ctx, tx, p, out, forgotten, start)
		return err
	})
	if errors.Is(err, errUndone) {
		// Between the two, another call may have taken the key (another
		// process, or another operation's reservation of the same key):
		// then this one answers as when the key has a record, and
		// nothing of it is stored.
		err = s.write(ctx, "transact", func(ctx context.Context, tx txn, _ time.Time) error {
			forgotten, err := s.open(ctx, tx, p, &res, start)
			if err != nil || !res.Reserved {
				return err
			}
			res.Attempt, err = s.closeTx(ctx, tx, p, out, forgotten, start)
			return err
		})
	}
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

// open begins a transactional execution in tx: it reads the key (a first
// execution finds no record: a probe of one column says so; the record is
// read whole only when there is one) and consumes the approval, if any.
// res is the key's live record, not reserved, when it has one; else
// reserved, forgotten saying that a record past retention holds the key.
func (s *Store) open(ctx context.Context, tx txn, p idem.ReserveParams, res *idem.TransactResult, start time.Time) (forgotten bool, err error) {
	*res = idem.TransactResult{}
	if p.Key != "" {
		held, err := keyHeld(ctx, tx, p.Scope, p.Key)
		if err != nil {
			return false, err
		}
		if held {
			a, live, gone, err := liveRecord(ctx, tx, p.Scope, p.Key, s.now())
			if err != nil || live {
				res.Attempt = a
				return false, err
			}
			forgotten = gone
		}
	}
	if err := consumeApproval(ctx, tx, p.StartParams, start); err != nil {
		return false, err
	}
	res.Reserved = true
	return forgotten, nil
}

// closeTx writes the execution's final row in tx, with out's result, unless
// the lease passed while the handler ran (ErrFenced: nothing commits).
func (s *Store) closeTx(ctx context.Context, tx txn, p idem.ReserveParams, out idem.TxOutcome, forgotten bool, start time.Time) (idem.Attempt, error) {
	now := s.now() // the handler took time: the lease is checked against now
	if p.Key != "" && !now.Before(start.Add(p.Lease)) {
		return idem.Attempt{}, idem.ErrFenced
	}
	return insertFinalTx(ctx, tx, p, out.Result, forgotten, start, now)
}

// insertFinalSQL inserts the final row of a transactional execution: its
// attempt record completed (keyed; never in flight, so without a fencing
// token), its execution finished, linked to the most recent earlier one of
// its intent, and all its events.
const insertFinalSQL = `INSERT INTO idem_records
	(org, id, principal, operation, fingerprint, key, held, state, lease_expires_at, status, sealed_key_id, completed_at,
		expires_at, secret_expires_at, attempts, outcome, code, reinvocation_of, started_at, finished_at, headers, events, body,
		fingerprint_version)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ` + previousExecutionSQL + `, ?18, ?19, ?20, ?21, ?22,
		NULLIF(?23, 0))`

// insertFinalTx stores c, the outcome of the transactional execution p
// that started at start, as its one final row in tx: for a key, the
// completed record (forgotten says a record past retention holds the key
// and gives it up first), which it returns; unkeyed, the finished
// execution alone.
func insertFinalTx(ctx context.Context, tx txn, p idem.ReserveParams, c idem.CompleteParams, forgotten bool, start, now time.Time) (idem.Attempt, error) {
	fin := c.Finish
	events, err := encodeEvents(append(newExecution(p.StartParams, p.Key, start).Events, fin.Events...), now)
	if err != nil {
		return idem.Attempt{}, err
	}
	// The attempt record's columns stay NULL unkeyed.
	var (
		a                                         idem.Attempt
		held                                      int
		key, state, sealedKeyID, headers          sql.NullString
		lease, status, completed, expires, secret sql.NullInt64
		version                                   int
	)
	if p.Key != "" {
		if forgotten {
			if err := forget(ctx, tx, p.Scope, p.Key); err != nil {
				return idem.Attempt{}, err
			}
		}
		a = idem.Attempt{
			Scope: p.Scope, Key: p.Key, Operation: p.Operation, Fingerprint: p.Fingerprint, FingerprintVersion: p.FingerprintVersion,
			State:       idem.FinalState(c.Status),
			ExecutionID: p.ExecutionID, LeaseExpiresAt: fromMicros(micros(start.Add(p.Lease))), Status: c.Status,
			Headers: idem.FilterReplayedHeaders(c.Headers), Body: c.Body, SealedKeyID: c.SealedKeyID, Attempts: fin.Attempts,
			CreatedAt: start, CompletedAt: now, ExpiresAt: fromMicros(micros(start.Add(p.Retention))),
		}
		if c.SealedKeyID != "" {
			a.SecretExpiresAt = fromMicros(micros(now.Add(c.SecretWindow)))
		}
		b, err := json.Marshal(a.Headers)
		if err != nil {
			return idem.Attempt{}, err
		}
		held, key, state, sealedKeyID, headers = 1, nullString(a.Key), nullString(string(a.State)), nullString(a.SealedKeyID), nullString(string(b))
		lease, status, completed = nullMicros(a.LeaseExpiresAt), sql.NullInt64{Int64: int64(a.Status), Valid: true}, nullMicros(now)
		expires, secret = nullMicros(a.ExpiresAt), nullMicros(a.SecretExpiresAt)
		version = p.FingerprintVersion
	}
	if _, err := tx.ExecContext(ctx, insertFinalSQL, p.Scope.Org, p.ExecutionID, p.Scope.Principal, p.Operation, p.Fingerprint,
		key, held, state, lease, status, sealedKeyID, completed, expires, secret,
		fin.Attempts, fin.Outcome, nullString(string(fin.Code)), micros(start), micros(now), headers, events, a.Body, version); err != nil {
		return idem.Attempt{}, err
	}
	return a.Observe(now), nil
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
