package pgstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-run/idem"
)

// A keyed transactional execution without an approval writes its record
// once, final, at the end (its key is held by the advisory lock meanwhile,
// and an uncommitted record is invisible anyway): one read at the start,
// one row inserted at the end, the record that is its execution too, with
// its events.

// peekSQL tries the key's lock, bounds the transaction's idle time and
// reads the record holding the key, in one statement.
var peekSQL = statement("peek")

// peekTx tries the key's lock and reads its record in one statement:
// found when the record is live (within retention, or in flight within its
// lease; the caller answers it, held or not); busy when another
// transaction holds the key and nothing live is committed.
func peekTx(ctx context.Context, tx pgx.Tx, p idem.ReserveParams, now time.Time) (a idem.Attempt, found, busy bool, err error) {
	var held bool
	a, err = scanAttempt(prefixed{tx.QueryRow(ctx, peekSQL, p.Scope.Org, p.Scope.Principal, p.Key, keyLockSeed,
		strconv.FormatInt(max(p.Lease.Milliseconds(), 1), 10)), []any{&held, &found}})
	if err != nil {
		return idem.Attempt{}, false, false, err
	}
	found = found && !a.Forgotten(now)
	return a.Observe(now), found, !held && !found, nil
}

// finalSQL inserts a transactional execution's final record, which is its
// finished execution, with its events.
var finalSQL = statement("insert_final")

// canInsertFinal reports whether finalSQL can store c for execution id:
// its final events are all of the execution itself.
func canInsertFinal(c idem.CompleteParams, id string) bool {
	_, others := splitEvents(c.Finish.Events, id)
	return others == nil
}

// insertFinalTx stores c as the key's final record, with its execution
// and events, in tx (finalSQL); start is when the execution began.
func insertFinalTx(ctx context.Context, tx pgx.Tx, p idem.ReserveParams, c idem.CompleteParams, headers []byte, start, now time.Time) (idem.Attempt, error) {
	var secretExpiresAt *time.Time
	if c.SealedKeyID != "" {
		t := now.Add(c.SecretWindow)
		secretExpiresAt = &t
	}
	fin := c.Finish
	x := newExecution(p.StartParams, p.Key, start)
	events, err := encodeEvents(append(x.Events, fin.Events...), now)
	if err != nil {
		return idem.Attempt{}, err
	}
	a, err := scanAttempt(tx.QueryRow(ctx, finalSQL, p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint,
		p.ExecutionID, start.Add(p.Lease), start, start.Add(p.Retention), string(idem.FinalState(c.Status)), c.Status,
		headers, c.Body, nullable(c.SealedKeyID), now, secretExpiresAt, fin.Attempts, string(fin.Outcome),
		nullable(string(fin.Code)), events, p.FingerprintVersion))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "idem_records_key" {
		// A holder committed between peekSQL's snapshot and its lock: the
		// key is busy, and nothing of this execution commits.
		return idem.Attempt{}, idem.ErrKeyBusy
	}
	return a, err
}
