package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/idem-run/idem"
)

const attemptColumns = `org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
	lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at`

// Reserve implements idem.Store.
func (s *Store) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	var res idem.ReserveResult
	err := s.write(ctx, "reserve", func(ctx context.Context, tx txn, now time.Time) error {
		var err error
		res, err = reserveTx(ctx, tx, p, now)
		return err
	})
	if err != nil {
		return idem.ReserveResult{}, err
	}
	return res, nil
}

// liveRecord reads the key's record in the write transaction tx: live for
// one within retention or in flight within its lease (Observed, and made
// indeterminate first when read past its lease); forgotten for one past
// retention that is still there.
func liveRecord(ctx context.Context, tx txn, scope idem.Scope, key string, now time.Time) (a idem.Attempt, live, forgotten bool, err error) {
	a, found, err := getAttempt(ctx, tx, scope, key)
	if err != nil || !found {
		return idem.Attempt{}, false, false, err
	}
	if a.Forgotten(now) {
		return idem.Attempt{}, false, true, nil
	}
	if a.LeasePassed(now) {
		if a, err = settleLease(ctx, tx, a, now); err != nil {
			return idem.Attempt{}, false, false, err
		}
	}
	return a.Observe(now), true, false, nil
}

// reserveTx reserves the key in the write transaction tx as Reserve does.
func reserveTx(ctx context.Context, tx txn, p idem.ReserveParams, now time.Time) (idem.ReserveResult, error) {
	a, live, forgotten, err := liveRecord(ctx, tx, p.Scope, p.Key, now)
	if err != nil {
		return idem.ReserveResult{}, err
	}
	if live {
		return idem.ReserveResult{Attempt: a}, nil
	}
	if forgotten {
		if _, err := tx.ExecContext(ctx, `DELETE FROM idem_attempts WHERE org = ? AND principal = ? AND key = ?`,
			p.Scope.Org, p.Scope.Principal, p.Key); err != nil {
			return idem.ReserveResult{}, err
		}
	}
	// The fencing token is the counter's next value; a trigger advances
	// the counter (migration 003).
	a, err = scanAttempt(tx.QueryRowContext(ctx, `INSERT INTO idem_attempts
		(org, principal, key, operation, fingerprint, state, execution_id, fencing_token, lease_expires_at, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, 'in_flight', ?, (SELECT value + 1 FROM idem_counters WHERE name = 'fencing_token'), ?, ?, ?)
		RETURNING `+attemptColumns,
		p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint, p.ExecutionID,
		micros(now.Add(p.Lease)), micros(now), micros(now.Add(p.Retention))))
	if err != nil {
		return idem.ReserveResult{}, err
	}
	exe, err := startExecution(ctx, tx, now, p.StartParams, p.Key)
	if err != nil {
		return idem.ReserveResult{}, err
	}
	return idem.ReserveResult{Attempt: a.Observe(now), Reserved: true, Execution: exe}, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	headers, err := json.Marshal(idem.FilterReplayedHeaders(p.Headers))
	if err != nil {
		return idem.Attempt{}, interpretError(ctx, "complete", err)
	}
	var out idem.Attempt
	err = s.write(ctx, "complete", func(ctx context.Context, tx txn, now time.Time) error {
		var err error
		out, err = completeTx(ctx, tx, p, headers, now)
		return err
	})
	if err != nil {
		return idem.Attempt{}, err
	}
	return out, nil
}

// completeTx completes the record in tx as Complete does; headers are
// p.Headers filtered and encoded.
func completeTx(ctx context.Context, tx txn, p idem.CompleteParams, headers []byte, now time.Time) (idem.Attempt, error) {
	var secretExpiresAt sql.NullInt64
	if p.SealedKeyID != "" {
		secretExpiresAt = nullMicros(now.Add(p.SecretWindow))
	}
	a, err := scanAttempt(tx.QueryRowContext(ctx, `UPDATE idem_attempts
		SET state = ?, status = ?, headers = ?, body = ?, sealed_key_id = ?, completed_at = ?, secret_expires_at = ?
		WHERE org = ? AND principal = ? AND key = ? AND fencing_token = ? AND state = 'in_flight' AND lease_expires_at > ?
		RETURNING `+attemptColumns,
		idem.FinalState(p.Status), p.Status, string(headers), p.Body, nullString(p.SealedKeyID), micros(now), secretExpiresAt,
		p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken, micros(now)))
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Attempt{}, idem.ErrFenced
	}
	if err != nil {
		return idem.Attempt{}, err
	}
	// The record names its execution; finish that one.
	fin := p.Finish
	fin.Org, fin.ExecutionID = a.Scope.Org, a.ExecutionID
	if err := finishExecution(ctx, tx, now, fin); err != nil {
		return idem.Attempt{}, err
	}
	return a.Observe(now), nil
}

// GetAttempt implements idem.Store.
func (s *Store) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	var out idem.Attempt
	err := s.read(ctx, "get attempt", func(tx txn, now time.Time) error {
		a, found, err := getAttempt(ctx, tx, p.Scope, p.Key)
		if err != nil {
			return err
		}
		if !found || a.Forgotten(now) {
			return idem.Errorf(idem.CodeNotFound, "no attempt record for idempotency key %q", p.Key)
		}
		out = a.Observe(now)
		return nil
	})
	if read := out; err == nil && read.LeasePassed(s.now()) {
		err = s.write(ctx, "mark indeterminate", func(ctx context.Context, tx txn, now time.Time) error {
			a, err := settleLease(ctx, tx, read, now)
			out = a.Observe(now)
			return err
		})
	}
	return out, err
}

// settleLease makes the passed lease of a, read in flight, durable before
// anyone is told (idem.Attempt.LeasePassed), inside a write transaction:
// the single writer serialises it with a fenced effect (CheckFence), so
// that effect either committed before, or fails its check. It returns the
// record as the write leaves it (changed meanwhile by its executor or a
// sweeper: as they left it).
func settleLease(ctx context.Context, tx txn, a idem.Attempt, now time.Time) (idem.Attempt, error) {
	if _, err := tx.ExecContext(ctx, `UPDATE idem_attempts SET state = 'indeterminate'
		WHERE org = ? AND principal = ? AND key = ? AND fencing_token = ? AND state = 'in_flight' AND lease_expires_at <= ?`,
		a.Scope.Org, a.Scope.Principal, a.Key, a.FencingToken, micros(now)); err != nil {
		return idem.Attempt{}, err
	}
	got, found, err := getAttempt(ctx, tx, a.Scope, a.Key)
	if err == nil && !found {
		err = idem.Errorf(idem.CodeNotFound, "no attempt record for idempotency key %q", a.Key)
	}
	return got, err
}

// getAttempt reads the stored record of (scope, key), not Observed.
func getAttempt(ctx context.Context, tx txn, scope idem.Scope, key string) (idem.Attempt, bool, error) {
	a, err := scanAttempt(tx.QueryRowContext(ctx, `SELECT `+attemptColumns+`
		FROM idem_attempts WHERE org = ? AND principal = ? AND key = ?`, scope.Org, scope.Principal, key))
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Attempt{}, false, nil
	}
	return a, err == nil, err
}

func scanAttempt(row *sql.Row) (idem.Attempt, error) {
	var (
		a                                             idem.Attempt
		status                                        sql.NullInt64
		headers, sealedKeyID                          sql.NullString
		lease, created, completed, expires, secretExp sql.NullInt64
	)
	err := row.Scan(&a.Scope.Org, &a.Scope.Principal, &a.Key, &a.Operation, &a.Fingerprint, &a.State, &a.ExecutionID,
		&a.FencingToken, &lease, &status, &headers, &a.Body, &sealedKeyID, &created, &completed, &expires, &secretExp)
	if err != nil {
		return idem.Attempt{}, err
	}
	if headers.Valid {
		if err := json.Unmarshal([]byte(headers.String), &a.Headers); err != nil {
			return idem.Attempt{}, err
		}
	}
	a.Status = int(status.Int64)
	a.SealedKeyID = sealedKeyID.String
	a.LeaseExpiresAt = timeOrZero(lease)
	a.CreatedAt = timeOrZero(created)
	a.CompletedAt = timeOrZero(completed)
	a.ExpiresAt = timeOrZero(expires)
	a.SecretExpiresAt = timeOrZero(secretExp)
	return a, nil
}

// LeaseLeft implements idem.Store.
func (s *Store) LeaseLeft(ctx context.Context, f idem.Fence) (time.Duration, error) {
	var left time.Duration
	err := s.read(ctx, "lease left", func(tx txn, now time.Time) error {
		var lease int64
		err := tx.QueryRowContext(ctx, `SELECT lease_expires_at FROM idem_attempts
			WHERE org = ? AND principal = ? AND key = ? AND fencing_token = ? AND state = 'in_flight'`,
			f.Scope.Org, f.Scope.Principal, f.Key, f.FencingToken).Scan(&lease)
		if errors.Is(err, sql.ErrNoRows) {
			return idem.ErrFenced
		}
		if err != nil {
			return err
		}
		left = max(fromMicros(lease).Sub(now), 0)
		return nil
	})
	return left, err
}
