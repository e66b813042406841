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

// Reserve inserts the attempt record, or replaces one past its retention
// that the sweeper has not deleted yet; a live record is left untouched
// (ON CONFLICT … WHERE keeps it, but locks it, so it cannot vanish before
// it is read back). When reserved, the approval is consumed and the
// execution started in the same transaction.
func (s *Store) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	now := s.now()
	var res idem.ReserveResult
	err := s.write(ctx, "reserve", func(ctx context.Context, tx pgx.Tx) error {
		res = idem.ReserveResult{}
		row := tx.QueryRow(ctx, `INSERT INTO idem_attempts AS a (org, principal, key, operation, fingerprint, state,
				execution_id, fencing_token, lease_expires_at, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, 'in_flight', $6, nextval('idem_fencing_tokens'), $7, $8, $9)
			ON CONFLICT (org, principal, key) DO UPDATE SET
				operation = excluded.operation, fingerprint = excluded.fingerprint, state = excluded.state,
				execution_id = excluded.execution_id, fencing_token = excluded.fencing_token,
				lease_expires_at = excluded.lease_expires_at, status = NULL, headers = NULL, body = NULL,
				sealed_key_id = NULL, created_at = excluded.created_at, completed_at = NULL,
				expires_at = excluded.expires_at, secret_expires_at = NULL
			WHERE a.expires_at <= $8
			RETURNING `+attemptColumns,
			p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint, p.ExecutionID,
			now.Add(p.Lease), now, now.Add(p.Retention))
		a, err := scanAttempt(row)
		if errors.Is(err, pgx.ErrNoRows) {
			// A live record holds the key: read it (locked by the upsert).
			a, err = scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM idem_attempts
				WHERE org = $1 AND principal = $2 AND key = $3`, p.Scope.Org, p.Scope.Principal, p.Key))
			res.Attempt = a.Observe(now)
			return err
		}
		if err != nil {
			return err
		}
		res.Reserved = true
		res.Attempt = a.Observe(now)
		res.Execution, err = startExecution(ctx, tx, p.StartParams, p.Key, now)
		return err
	})
	if err != nil {
		return idem.ReserveResult{}, err
	}
	return res, nil
}

// Complete stores the result if the record is still in flight under the
// caller's fencing token and lease, then finishes the execution.
func (s *Store) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	now := s.now()
	headers, err := json.Marshal(idem.FilterReplayedHeaders(p.Headers))
	if err != nil {
		return idem.Attempt{}, err
	}
	var secretExpiresAt *time.Time
	if p.SealedKeyID != "" {
		t := now.Add(p.SecretWindow)
		secretExpiresAt = &t
	}
	var a idem.Attempt
	err = s.write(ctx, "complete", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		a, err = scanAttempt(tx.QueryRow(ctx, `UPDATE idem_attempts SET
				state = $5, status = $6, headers = $7, body = $8, sealed_key_id = $9,
				completed_at = $10, secret_expires_at = $11
			WHERE org = $1 AND principal = $2 AND key = $3 AND fencing_token = $4
				AND state = 'in_flight' AND lease_expires_at > $10
			RETURNING `+attemptColumns,
			p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken,
			string(idem.FinalState(p.Status)), p.Status, headers, p.Body, nullable(p.SealedKeyID), now, secretExpiresAt))
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.ErrFenced
		}
		if err != nil {
			return err
		}
		// The record names its execution; finish that one.
		fin := p.Finish
		fin.Org, fin.ExecutionID = a.Scope.Org, a.ExecutionID
		return finishExecution(ctx, tx, fin, now)
	})
	if err != nil {
		return idem.Attempt{}, err
	}
	return a.Observe(now), nil
}

// GetAttempt reads the record; a forgotten one that is not swept yet is
// NOT_FOUND too.
func (s *Store) GetAttempt(ctx context.Context, scope idem.Scope, key string) (idem.Attempt, error) {
	now := s.now()
	var a idem.Attempt
	err := s.inTx(ctx, "get attempt", func(tx pgx.Tx) error {
		var err error
		a, err = scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM idem_attempts
			WHERE org = $1 AND principal = $2 AND key = $3`, scope.Org, scope.Principal, key))
		if errors.Is(err, pgx.ErrNoRows) || err == nil && a.Forgotten(now) {
			return idem.Errorf(idem.CodeNotFound, "no attempt record for key %q", key)
		}
		return err
	})
	if err != nil {
		return idem.Attempt{}, err
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
