package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/idem-run/idem"
)

// attemptColumns are the columns of a row of idem_records that make its
// attempt record, in scanAttempt's order. The record's creation is the
// execution's start (started_at).
const attemptColumns = `org, principal, key, operation, fingerprint, state, id, fencing_token,
	lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts,
	fingerprint_version`

// byKey selects the row that holds the key ?1 org, ?2 principal, ?3 key,
// through the index idem_records_key.
const byKey = `org = ?1 AND principal = ?2 AND key = ?3 AND held = 1`

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
// retention that still holds the key.
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

// keyHeld reports whether a record holds the key, in tx. It reads one
// column: the driver reads each result column's name and type on every
// query, so a miss costs a fifth of what reading the record (19 columns,
// getAttempt) does.
func keyHeld(ctx context.Context, tx txn, scope idem.Scope, key string) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM idem_records WHERE `+byKey, scope.Org, scope.Principal, key).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// forget makes the key's record past retention give up its key, in tx:
// its result goes (body and headers), its execution stays until the audit
// retention.
func forget(ctx context.Context, tx txn, scope idem.Scope, key string) error {
	_, err := tx.ExecContext(ctx, `UPDATE idem_records SET held = 0, headers = NULL, body = NULL WHERE `+byKey,
		scope.Org, scope.Principal, key)
	return err
}

// reserveSQL inserts a reservation's row, unless the key is held: its
// attempt record in flight, its fencing token the counter's next value (a
// trigger advances the counter, migration 005), its execution linked to
// the most recent earlier one of its intent, its first events and its
// fingerprint's version (0 stored as NULL, as a record made before
// versions were, migration 006).
const reserveSQL = `INSERT INTO idem_records
	(org, id, principal, operation, fingerprint, key, held, state, fencing_token, lease_expires_at, expires_at,
		attempts, outcome, reinvocation_of, started_at, events, fingerprint_version)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, 'in_flight', (SELECT value + 1 FROM idem_counters WHERE name = 'fencing_token'), ?7, ?8,
		1, 'running', ` + previousExecutionSQL + `, ?9, ?10, NULLIF(?11, 0))
	ON CONFLICT (org, principal, key) WHERE held = 1 DO NOTHING
	RETURNING fencing_token, reinvocation_of`

// reserveTx reserves the key in the write transaction tx as Reserve does:
// a fresh key costs one statement (the row's INSERT), a key with a record
// two (the INSERT that did nothing, the read).
func reserveTx(ctx context.Context, tx txn, p idem.ReserveParams, now time.Time) (idem.ReserveResult, error) {
	exe := newExecution(p.StartParams, p.Key, now)
	events, err := encodeEvents(exe.Events, now)
	if err != nil {
		return idem.ReserveResult{}, err
	}
	a := idem.Attempt{
		Scope: p.Scope, Key: p.Key, Operation: p.Operation, Fingerprint: p.Fingerprint, FingerprintVersion: p.FingerprintVersion,
		State: idem.AttemptInFlight, ExecutionID: p.ExecutionID, LeaseExpiresAt: fromMicros(micros(now.Add(p.Lease))), CreatedAt: now,
		ExpiresAt: fromMicros(micros(now.Add(p.Retention))),
	}
	// insert reports false when the key is held.
	insert := func() (bool, error) {
		var previous sql.NullString
		err := tx.QueryRowContext(ctx, reserveSQL, p.Scope.Org, p.ExecutionID, p.Scope.Principal, p.Operation, p.Fingerprint, p.Key,
			micros(a.LeaseExpiresAt), micros(a.ExpiresAt), micros(now), events, p.FingerprintVersion).Scan(&a.FencingToken, &previous)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		exe.ReinvocationOf = stringPtr(previous)
		return err == nil, err
	}
	inserted, err := insert()
	if err != nil {
		return idem.ReserveResult{}, err
	}
	if !inserted {
		existing, live, forgotten, err := liveRecord(ctx, tx, p.Scope, p.Key, now)
		switch {
		case err != nil:
			return idem.ReserveResult{}, err
		case live:
			return idem.ReserveResult{Attempt: existing}, nil
		case !forgotten:
			return idem.ReserveResult{}, errors.New("reserve: the key is held, yet its record cannot be read")
		}
		if err := forget(ctx, tx, p.Scope, p.Key); err != nil {
			return idem.ReserveResult{}, err
		}
		if inserted, err = insert(); err == nil && !inserted {
			err = errors.New("reserve: the key is still held once its record was forgotten")
		}
		if err != nil {
			return idem.ReserveResult{}, err
		}
	}
	if err := consumeApproval(ctx, tx, p.StartParams, now); err != nil {
		return idem.ReserveResult{}, err
	}
	return idem.ReserveResult{Attempt: a, Reserved: true, Execution: exe}, nil
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

// completeSQL stores the result of the reservation of ?1 org, ?2
// principal, ?3 key under fencing token ?4, while in flight and its lease
// (past ?5, now) holds, and finishes its execution with its final events:
// one statement for the row.
var completeSQL = `UPDATE idem_records
	SET state = ?6, status = ?7, headers = ?8, body = ?9, sealed_key_id = ?10, completed_at = ?5, secret_expires_at = ?11,
		outcome = ?12, code = ?13, attempts = ?14, finished_at = ?5, ` + appendEventsSQL("?15") + `
	WHERE ` + byKey + ` AND fencing_token = ?4 AND state = 'in_flight' AND lease_expires_at > ?5
	RETURNING ` + attemptColumns

// completeTx completes the record in tx as Complete does; headers are
// p.Headers filtered and encoded. The events are all the record's
// execution's.
func completeTx(ctx context.Context, tx txn, p idem.CompleteParams, headers []byte, now time.Time) (idem.Attempt, error) {
	var secretExpiresAt sql.NullInt64
	if p.SealedKeyID != "" {
		secretExpiresAt = nullMicros(now.Add(p.SecretWindow))
	}
	events, err := encodeEvents(p.Finish.Events, now)
	if err != nil {
		return idem.Attempt{}, err
	}
	fin := p.Finish
	a, err := scanAttempt(tx.QueryRowContext(ctx, completeSQL, p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken, micros(now),
		idem.FinalState(p.Status), p.Status, string(headers), p.Body, nullString(p.SealedKeyID), secretExpiresAt,
		fin.Outcome, nullString(string(fin.Code)), fin.Attempts, events))
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Attempt{}, idem.ErrFenced
	}
	if err != nil {
		return idem.Attempt{}, err
	}
	return a.Observe(now), nil
}

// GetAttempt implements idem.Store. Its one statement runs on the read
// pool without BEGIN and COMMIT (a statement reads one snapshot by itself).
func (s *Store) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	if s.rstmts.hasWanted() {
		s.rstmts.prepareWanted(ctx)
	}
	now := s.now()
	a, found, err := getAttempt(ctx, pool{s.r, s.rstmts}, p.Scope, p.Key)
	switch {
	case err != nil:
		return idem.Attempt{}, interpretFileError(ctx, s.path, "get attempt", err)
	case !found || a.Forgotten(now):
		return idem.Attempt{}, idem.Errorf(idem.CodeNotFound, "no attempt record for idempotency key %q", p.Key)
	}
	out := a.Observe(now)
	if read := out; read.LeasePassed(s.now()) {
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
	got, err := scanAttempt(tx.QueryRowContext(ctx, `UPDATE idem_records SET state = 'indeterminate'
		WHERE `+byKey+` AND fencing_token = ?4 AND state = 'in_flight' AND lease_expires_at <= ?5
		RETURNING `+attemptColumns,
		a.Scope.Org, a.Scope.Principal, a.Key, a.FencingToken, micros(now)))
	if !errors.Is(err, sql.ErrNoRows) {
		return got, err
	}
	got, found, err := getAttempt(ctx, tx, a.Scope, a.Key)
	if err == nil && !found {
		err = idem.Errorf(idem.CodeNotFound, "no attempt record for idempotency key %q", a.Key)
	}
	return got, err
}

// getAttempt reads the record that holds (scope, key), not Observed.
func getAttempt(ctx context.Context, tx rowQuerier, scope idem.Scope, key string) (idem.Attempt, bool, error) {
	a, err := scanAttempt(tx.QueryRowContext(ctx, `SELECT `+attemptColumns+` FROM idem_records WHERE `+byKey,
		scope.Org, scope.Principal, key))
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Attempt{}, false, nil
	}
	return a, err == nil, err
}

// scanAttempt reads one row of attemptColumns.
func scanAttempt(row *sql.Row) (idem.Attempt, error) {
	var (
		a                                             idem.Attempt
		token, status, attempts                       sql.NullInt64
		headers, sealedKeyID                          sql.NullString
		lease, created, completed, expires, secretExp sql.NullInt64
		version                                       sql.NullInt64
	)
	err := row.Scan(&a.Scope.Org, &a.Scope.Principal, &a.Key, &a.Operation, &a.Fingerprint, &a.State, &a.ExecutionID,
		&token, &lease, &status, &headers, &a.Body, &sealedKeyID, &created, &completed, &expires, &secretExp, &attempts, &version)
	if err != nil {
		return idem.Attempt{}, err
	}
	a.FingerprintVersion = int(version.Int64)
	if headers.Valid {
		if err := json.Unmarshal([]byte(headers.String), &a.Headers); err != nil {
			return idem.Attempt{}, err
		}
	}
	a.FencingToken = token.Int64
	a.Status = int(status.Int64)
	a.Attempts = int(attempts.Int64)
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
		err := tx.QueryRowContext(ctx, `SELECT lease_expires_at FROM idem_records
			WHERE `+byKey+` AND fencing_token = ?4 AND state = 'in_flight'`,
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
