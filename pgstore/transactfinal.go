package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

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
	row := &peeked{}
	if err = tx.QueryRow(ctx, peekSQL, p.Scope.Org, p.Scope.Principal, p.Key, keyLockSeed,
		strconv.FormatInt(max(p.Lease.Milliseconds(), 1), 10)).Scan(row); err != nil {
		return idem.Attempt{}, false, false, err
	}
	a, found = row.a, row.found && !row.a.Forgotten(now)
	return a.Observe(now), found, !row.held && !found, nil
}

// peeked is peekSQL's row. A first execution finds no record: its two
// flags are read from the row as it came, and the record's columns (which
// pgx would plan and decode one by one, NULLs too) only when there is one.
type peeked struct {
	held, found bool
	a           idem.Attempt
}

func (p *peeked) ScanRow(rows pgx.Rows) error {
	raw, fields := rows.RawValues(), rows.FieldDescriptions()
	if len(raw) < 2 || len(fields) < 2 {
		return fmt.Errorf("peek: %d columns", len(raw))
	}
	var err error
	if p.held, err = rawBool(raw[0], fields[0].Format); err != nil {
		return err
	}
	if p.found, err = rawBool(raw[1], fields[1].Format); err != nil || !p.found {
		return err
	}
	var held, found bool
	p.a, err = scanAttempt(prefixed{rows, []any{&held, &found}})
	return err
}

// rawBool reads a boolean as PostgreSQL sent it: one byte in the binary
// format, "t" or "f" in the text one.
func rawBool(v []byte, format int16) (bool, error) {
	switch {
	case format == pgtype.BinaryFormatCode && len(v) == 1:
		return v[0] != 0, nil
	case format == pgtype.TextFormatCode && len(v) == 1 && (v[0] == 't' || v[0] == 'f'):
		return v[0] == 't', nil
	}
	return false, fmt.Errorf("peek: %q is not a boolean", v)
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
// and events, in tx (finalSQL), and returns the record as stored; start is
// when the execution began, headers c's replayed headers (filtered) and
// their JSON. Only the fencing token comes back: the rest is what was
// sent, at the store's precision (microseconds), so that the body is not
// read back nor the headers decoded again.
func insertFinalTx(ctx context.Context, tx pgx.Tx, p idem.ReserveParams, c idem.CompleteParams, headers http.Header, headersJSON []byte, start, now time.Time) (idem.Attempt, error) {
	fin := c.Finish
	a := idem.Attempt{
		Scope: p.Scope, Key: p.Key, Operation: p.Operation, Fingerprint: p.Fingerprint, FingerprintVersion: p.FingerprintVersion,
		State: idem.FinalState(c.Status), ExecutionID: p.ExecutionID, Status: c.Status, Headers: headers, Body: c.Body,
		SealedKeyID: c.SealedKeyID, Attempts: fin.Attempts,
		LeaseExpiresAt: micro(start.Add(p.Lease)), CreatedAt: micro(start), CompletedAt: micro(now), ExpiresAt: micro(start.Add(p.Retention)),
	}
	var secretExpiresAt *time.Time
	if c.SealedKeyID != "" {
		a.SecretExpiresAt = micro(now.Add(c.SecretWindow))
		secretExpiresAt = &a.SecretExpiresAt
	}
	x := newExecution(p.StartParams, p.Key, start)
	events, err := encodeEvents(append(x.Events, fin.Events...), now)
	if err != nil {
		return idem.Attempt{}, err
	}
	err = tx.QueryRow(ctx, finalSQL, p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint,
		p.ExecutionID, a.LeaseExpiresAt, a.CreatedAt, a.ExpiresAt, string(a.State), c.Status,
		headersJSON, c.Body, nullable(c.SealedKeyID), a.CompletedAt, secretExpiresAt, fin.Attempts, string(fin.Outcome),
		nullable(string(fin.Code)), events, p.FingerprintVersion).Scan(&a.FencingToken)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "idem_records_key" {
		// A holder committed between peekSQL's snapshot and its lock: the
		// key is busy, and nothing of this execution commits.
		return idem.Attempt{}, idem.ErrKeyBusy
	}
	if err != nil {
		return idem.Attempt{}, err
	}
	return a, nil
}

// micro is t in UTC at the store's precision: timestamptz keeps
// microseconds, and pgx sends t's microseconds, the nanoseconds cut.
func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
