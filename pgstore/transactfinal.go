package pgstore

import (
	"context"
	"fmt"
	"strings"
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

// finalSQL inserts a transactional execution's final record, its finished
// execution (linked to the most recent earlier one of the intent) and its
// events: execution.started, then n more (by index, 1 to manyEvents).
// Forgotten rows of the key go first, as in a reservation. Parameters: $1
// org, $2 principal, $3 key, $4 operation, $5 fingerprint, $6 execution
// id, $7 lease expiry, $8 start, $9 retention expiry, $10 state, $11
// status, $12 headers, $13 body, $14 sealed key id, $15 now, $16 secret
// expiry, $17 attempts, $18 outcome, $19 code, then the events
// (eventParams each).
var finalSQL = func() (qs [manyEvents + 1]string) {
	for n := 1; n <= manyEvents; n++ {
		rows := []string{fmt.Sprintf(`(0, NULL::text, '%s'::text, $8::timestamptz, 1::int, NULL::text, NULL::text, NULL::int, NULL::bigint, NULL::jsonb)`, idem.EventStarted)}
		for i := range n {
			k := 20 + i*eventParams
			rows = append(rows, fmt.Sprintf(`(%d, $%d::text, $%d::text, $%d::timestamptz, $%d::int, $%d::text, $%d::text, $%d::int, $%d::bigint, $%d::jsonb)`,
				i+1, k, k+1, k+2, k+3, k+4, k+5, k+6, k+7, k+8))
		}
		qs[n] = `WITH gone AS (
		DELETE FROM idem_attempts
		WHERE org = $1 AND principal = $2 AND key = $3 AND expires_at <= $8
			AND NOT (state = 'in_flight' AND lease_expires_at > $8)
		RETURNING 1),
	made AS (
		INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
			lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at)
		SELECT $1, $2, $3, $4::text, $5::text, $10::text, $6::text, nextval('idem_fencing_tokens'),
			$7::timestamptz, $11::int, $12::jsonb, $13::bytea, $14::text, $8::timestamptz, $15::timestamptz, $9::timestamptz, $16::timestamptz
		WHERE (SELECT count(*) FROM gone) >= 0
		RETURNING ` + attemptColumns + `),
	exe AS (
		INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
			attempts, outcome, code, reinvocation_of, started_at, finished_at)
		SELECT $1::text, $6::text, $2::text, $4::text, $5::text, $3::text, $17::int, $18::text, $19::text,
			` + previousExecution("$1::text", "$2::text", "$4::text", "$5::text") + `, $8::timestamptz, $15::timestamptz
		FROM made
		RETURNING id),
	ev AS (
		INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
			attempts, duration_ms, data)
		SELECT $1::text, exe.id, r.type, r.at, r.attempt, r.code, r.previous_error_code, r.attempts, r.duration_ms, r.data
		FROM exe, (VALUES ` + strings.Join(rows, ", ") + `) AS r(n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)
		ORDER BY r.n
		RETURNING 1)
	SELECT (SELECT count(*) FROM ev), ` + attemptColumns + ` FROM made`
	}
	return qs
}()

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
	a, err := scanAttempt(prefixed{tx.QueryRow(ctx, finalSQL[len(fin.Events)], args...), []any{&events}})
	if err != nil {
		return idem.Attempt{}, err
	}
	if events != len(fin.Events)+1 {
		return idem.Attempt{}, fmt.Errorf("pgstore: %d of %d events inserted", events, len(fin.Events)+1)
	}
	return a, nil
}
