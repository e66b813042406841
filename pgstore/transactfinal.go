package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// A keyed transactional execution without an approval writes its record
// once, final, at the end (its key is held by the advisory lock meanwhile,
// and an uncommitted record is invisible anyway): one read at the start,
// one statement inserting the record, the execution and its events at the
// end, where a two-phase reservation inserts and then updates each.

// peekTx tries the key's lock and reads its record in one round trip:
// found when the record is live (within retention, or in flight within its
// lease; the caller answers it, held or not); busy when another
// transaction holds the key and nothing live is committed.
func peekTx(ctx context.Context, tx pgx.Tx, p idem.ReserveParams, now time.Time) (a idem.Attempt, found, busy bool, err error) {
	a, found, held, err := readUnderKeyLock(ctx, tx, p.Scope, p.Key, true)
	if err != nil {
		return idem.Attempt{}, false, false, err
	}
	found = found && !a.Forgotten(now)
	return a.Observe(now), found, !held && !found, nil
}

// finalSQL inserts a transactional execution's final record, its
// finished execution and its events (execution.started and one to
// manyEvents more).
var finalSQL = statement("insert_final")

// canInsertFinal reports whether finalSQL can store c for execution id: 1
// to manyEvents final events, each of the execution itself.
func canInsertFinal(c idem.CompleteParams, id string) bool {
	n := len(c.Finish.Events)
	if n < 1 || n > manyEvents {
		return false
	}
	for _, ev := range c.Finish.Events {
		if ev.ExecutionID != "" && ev.ExecutionID != id {
			return false
		}
	}
	return true
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
	args := []any{p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint, p.ExecutionID,
		start.Add(p.Lease), start, start.Add(p.Retention), string(idem.FinalState(c.Status)), c.Status, headers, c.Body,
		nullable(c.SealedKeyID), now, secretExpiresAt, fin.Attempts, string(fin.Outcome), nullable(string(fin.Code))}
	args, err := appendEventArgs(args, fin.Events, now)
	if err != nil {
		return idem.Attempt{}, err
	}
	var events int
	a, err := scanAttempt(prefixed{tx.QueryRow(ctx, finalSQL, args...), []any{&events}})
	if err != nil {
		return idem.Attempt{}, err
	}
	if events != len(fin.Events)+1 {
		return idem.Attempt{}, fmt.Errorf("pgstore: %d of %d events inserted", events, len(fin.Events)+1)
	}
	return a, nil
}
