package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"idem"
)

const attemptColumns = `org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
	lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at`

// keyLockSeed is the seed of the hash that turns (org, principal, key) into
// the advisory lock Reserve takes ("idem_key" in ASCII).
const keyLockSeed int64 = 0x6964656d5f6b6579

// reserveSQL runs under the key's advisory lock. It returns the newest
// record of the key if it is within retention (reserved = false);
// otherwise it deletes the key's forgotten rows and inserts the new record
// (reserved = true). made reads gone so that the delete runs first: a new
// row may then reuse the primary key of the one it replaces.
const reserveSQL = `WITH live AS (
		SELECT ` + attemptColumns + ` FROM (
			SELECT ` + attemptColumns + ` FROM idem_attempts
			WHERE org = $1 AND principal = $2 AND key = $3
			ORDER BY created_at DESC LIMIT 1) newest
		WHERE expires_at > $8),
	gone AS (
		DELETE FROM idem_attempts
		WHERE org = $1 AND principal = $2 AND key = $3 AND expires_at <= $8
			AND NOT EXISTS (SELECT FROM live)
		RETURNING 1),
	made AS (
		INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state,
			execution_id, fencing_token, lease_expires_at, created_at, expires_at)
		SELECT $1, $2, $3, $4::text, $5::text, 'in_flight', $6::text, nextval('idem_fencing_tokens'),
			$7::timestamptz, $8, $9::timestamptz
		WHERE NOT EXISTS (SELECT FROM live) AND (SELECT count(*) FROM gone) >= 0
		RETURNING ` + attemptColumns + `)
	SELECT true, ` + attemptColumns + ` FROM made
	UNION ALL
	SELECT false, ` + attemptColumns + ` FROM live`

// Reserve inserts the attempt record, or replaces one past its retention
// that the sweeper has not removed yet; a live record is left untouched.
// The table is partitioned by creation time, so its primary key cannot
// make (org, principal, key) unique: a transaction-scoped advisory lock on
// the key makes reservations of one key queue, from any instance, and the
// reservation statement, sent in the same round trip but run after the
// lock is granted, reads what the previous holder committed. When
// reserved, the approval is consumed and the execution started in the
// same transaction.
func (s *Store) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	var res idem.ReserveResult
	err := s.write(ctx, "reserve", func(ctx context.Context, tx pgx.Tx) error {
		now := s.now() // when it runs, which may be late in a batch
		res = idem.ReserveResult{}
		var b pgx.Batch
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, $4))`,
			p.Scope.Org, p.Scope.Principal, p.Key, keyLockSeed)
		b.Queue(reserveSQL, p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint, p.ExecutionID,
			now.Add(p.Lease), now, now.Add(p.Retention))
		br := tx.SendBatch(ctx, &b)
		_, err := br.Exec()
		var a idem.Attempt
		if err == nil {
			a, err = scanAttempt(prefixed{br.QueryRow(), &res.Reserved})
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		res.Attempt = a.Observe(now)
		if !res.Reserved {
			return nil
		}
		res.Execution, err = startExecution(ctx, tx, p.StartParams, p.Key, now)
		return err
	})
	if err != nil {
		return idem.ReserveResult{}, err
	}
	return res, nil
}

// prefixed scans its first column into first and the rest into the
// destinations it is given.
type prefixed struct {
	row   scanner
	first any
}

func (p prefixed) Scan(dest ...any) error {
	return p.row.Scan(append([]any{p.first}, dest...)...)
}

// Complete stores the result if the record is still in flight under the
// caller's fencing token and lease, then finishes the execution. Fencing
// tokens are unique, so the token picks the one row among the key's.
func (s *Store) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	headers, err := json.Marshal(idem.FilterReplayedHeaders(p.Headers))
	if err != nil {
		return idem.Attempt{}, err
	}
	var a idem.Attempt
	var now time.Time
	err = s.write(ctx, "complete", func(ctx context.Context, tx pgx.Tx) error {
		now = s.now() // when it runs: the lease is checked against it
		var secretExpiresAt *time.Time
		if p.SealedKeyID != "" {
			t := now.Add(p.SecretWindow)
			secretExpiresAt = &t
		}
		var err error
		var watched bool
		a, err = scanAttempt(prefixed{tx.QueryRow(ctx, `UPDATE idem_attempts SET
				state = $5, status = $6, headers = $7, body = $8, sealed_key_id = $9,
				completed_at = $10, secret_expires_at = $11
			WHERE org = $1 AND principal = $2 AND key = $3 AND fencing_token = $4
				AND state = 'in_flight' AND lease_expires_at > $10
			RETURNING watched, `+attemptColumns,
			p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken,
			string(idem.FinalState(p.Status)), p.Status, headers, p.Body, nullable(p.SealedKeyID), now, secretExpiresAt), &watched})
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.ErrFenced
		}
		if err != nil {
			return err
		}
		// The record names its execution; finish that one.
		fin := p.Finish
		fin.Org, fin.ExecutionID = a.Scope.Org, a.ExecutionID
		notify := ""
		if watched { // a waiter on another instance asked to be told (Watch)
			notify = notifyPayload(p.Scope, p.Key)
		}
		return finishExecution(ctx, tx, fin, now, notify)
	})
	if err != nil {
		return idem.Attempt{}, err
	}
	return a.Observe(now), nil
}

// GetAttempt reads the key's newest record; a forgotten one that is not
// removed yet is NOT_FOUND too. One statement, so no explicit transaction:
// one round trip.
func (s *Store) GetAttempt(ctx context.Context, scope idem.Scope, key string) (idem.Attempt, error) {
	now := s.now()
	a, err := scanAttempt(s.pool.QueryRow(ctx, `SELECT `+attemptColumns+` FROM idem_attempts
		WHERE org = $1 AND principal = $2 AND key = $3
		ORDER BY created_at DESC LIMIT 1`, scope.Org, scope.Principal, key))
	if errors.Is(err, pgx.ErrNoRows) || err == nil && a.Forgotten(now) {
		return idem.Attempt{}, idem.Errorf(idem.CodeNotFound, "no attempt record for key %q", key)
	}
	if err != nil {
		return idem.Attempt{}, interpretError(ctx, "get attempt", err)
	}
	return a.Observe(now), nil
}

// scanAttempt reads one row of attemptColumns.
func scanAttempt(row scanner) (idem.Attempt, error) {
	var (
		a                                          idem.Attempt
		state                                      string
		status                                     *int
		headers                                    []byte
		sealedKeyID                                *string
		lease, created, completed, expires, secret *time.Time
	)
	err := row.Scan(&a.Scope.Org, &a.Scope.Principal, &a.Key, &a.Operation, &a.Fingerprint, &state,
		&a.ExecutionID, &a.FencingToken, &lease, &status, &headers, &a.Body, &sealedKeyID,
		&created, &completed, &expires, &secret)
	if err != nil {
		return idem.Attempt{}, err
	}
	a.State = idem.AttemptState(state)
	if status != nil {
		a.Status = *status
	}
	if headers != nil {
		if err := json.Unmarshal(headers, &a.Headers); err != nil {
			return idem.Attempt{}, err
		}
	}
	if sealedKeyID != nil {
		a.SealedKeyID = *sealedKeyID
	}
	a.LeaseExpiresAt, a.CreatedAt, a.CompletedAt = utc(lease), utc(created), utc(completed)
	a.ExpiresAt, a.SecretExpiresAt = utc(expires), utc(secret)
	return a, nil
}

// LeaseLeft implements idem.Store: one statement, judged by the store's
// clock.
func (s *Store) LeaseLeft(ctx context.Context, f idem.Fence) (time.Duration, error) {
	var lease time.Time
	err := s.pool.QueryRow(ctx, `SELECT lease_expires_at FROM idem_attempts
		WHERE org = $1 AND principal = $2 AND key = $3 AND fencing_token = $4 AND state = 'in_flight'`,
		f.Scope.Org, f.Scope.Principal, f.Key, f.FencingToken).Scan(&lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, idem.ErrFenced
	}
	if err != nil {
		return 0, interpretError(ctx, "lease left", err)
	}
	return max(lease.Sub(s.now()), 0), nil
}
