package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-run/idem"
)

// The statements of attempt records; their files in sql/ say what they
// take and return.
var (
	// keyLockSQL takes the key's advisory lock, tryKeyLockSQL only tries it.
	keyLockSQL    = section("key_lock", "lock")
	tryKeyLockSQL = section("key_lock", "try")
	// getAttemptSQL reads the record holding a key, forgotten or not.
	getAttemptSQL = statement("get_attempt")
	// reserveSQL and reserveApprovedSQL reserve a key and start its
	// execution, the second consuming an approval first.
	reserveSQL         = statement("reserve")
	reserveApprovedSQL = statement("reserve_with_approval")
	// completeSQL completes a record and finishes its execution.
	completeSQL = statement("complete_attempt")
	// markIndeterminateSQL and getAttemptByTokenSQL settle a passed lease.
	markIndeterminateSQL = statement("mark_indeterminate")
	getAttemptByTokenSQL = statement("get_attempt_by_token")
	lockTimeoutSQL       = statement("lock_timeout")
	leaseLeftSQL         = statement("lease_left")
)

// keyLockSeed is the seed of the hash that turns (org, principal, key) into
// the advisory lock Reserve takes ("idem_key" in ASCII).
const keyLockSeed int64 = 0x6964656d5f6b6579

// queueKeyLock queues the transaction-scoped advisory lock of (scope, key)
// in b. Reserve and a keyed RequestApproval take it, so that they queue
// from any instance and each reads what the previous holder committed.
func queueKeyLock(b *pgx.Batch, scope idem.Scope, key string) {
	b.Queue(keyLockSQL, scope.Org, scope.Principal, key, keyLockSeed)
}

// queueTryKeyLock queues a try of the same lock, which reads true when it
// is taken and false, at once, when another transaction holds it, and
// bounds the transaction's idle time by idle (Transact).
func queueTryKeyLock(b *pgx.Batch, scope idem.Scope, key string, idle time.Duration) {
	b.Queue(tryKeyLockSQL, scope.Org, scope.Principal, key, keyLockSeed, strconv.FormatInt(max(idle.Milliseconds(), 1), 10))
}

// lockKeyAndRead takes the key's lock in tx and reads the record holding
// the key, in one round trip; found is false when there is none.
func lockKeyAndRead(ctx context.Context, tx pgx.Tx, scope idem.Scope, key string) (a idem.Attempt, found bool, err error) {
	var b pgx.Batch
	queueKeyLock(&b, scope, key)
	b.Queue(getAttemptSQL, scope.Org, scope.Principal, key)
	br := tx.SendBatch(ctx, &b)
	_, err = br.Exec()
	if err == nil {
		a, err = scanAttempt(br.QueryRow())
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return a, found && err == nil, err
}

// Reserve inserts the attempt record, which is its execution too, or
// replaces one past its retention that the sweeper has not forgotten yet;
// a live record is left untouched. A transaction-scoped advisory lock on
// the key makes reservations of one key queue, from any instance, and the
// reservation statement, sent in the same round trip but run after the
// lock is granted, reads what the previous holder committed (the unique
// index on held keys would make a racing insert wait too, but then its
// statement could not read the winner's row). When it reserves, the same
// statement consumes the approval.
func (s *Store) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	var res idem.ReserveResult
	var now time.Time
	err := s.write(ctx, "reserve", func(ctx context.Context, tx pgx.Tx) error {
		now = s.now() // when it runs, which may be late in a batch
		var err error
		res, _, err = reserveTx(ctx, tx, p, now, false)
		return err
	})
	if err != nil {
		return idem.ReserveResult{}, err
	}
	if !res.Reserved && res.Attempt.LeasePassed(now) {
		// Outside the batch: the write may wait for a fenced effect.
		if res.Attempt, err = s.settleLease(ctx, res.Attempt); err != nil {
			return idem.ReserveResult{}, err
		}
	}
	return res, nil
}

// reserveTx takes the key's lock in tx and reserves the key as Reserve
// does, in one round trip: the lock, then one statement that reserves
// and, only when it did, starts the execution. With try, the lock is only
// tried (and the transaction's idle time bounded by the lease): when
// another transaction holds it, busy is true and tx has written nothing (its caller rolls it back). An approval that is not
// consumable is ErrApprovalNotConsumable, with the record written: the
// caller rolls tx back.
func reserveTx(ctx context.Context, tx pgx.Tx, p idem.ReserveParams, now time.Time, try bool) (res idem.ReserveResult, busy bool, err error) {
	var b pgx.Batch
	x := newExecution(p.StartParams, p.Key, now)
	events, err := encodeEvents(x.Events, now)
	if err != nil {
		return idem.ReserveResult{}, false, err
	}
	q, args := reserveSQL, []any{p.Scope.Org, p.Scope.Principal, p.Key, p.Operation, p.Fingerprint, p.ExecutionID,
		now.Add(p.Lease), now, now.Add(p.Retention), try, keyLockSeed, events, p.FingerprintVersion}
	if p.ApprovalID != "" {
		q, args = reserveApprovedSQL, append(args, p.ApprovalID)
	}
	if try {
		queueTryKeyLock(&b, p.Scope, p.Key, p.Lease)
	} else {
		queueKeyLock(&b, p.Scope, p.Key)
	}
	b.Queue(q, args...)
	br := tx.SendBatch(ctx, &b)
	got := true
	if try {
		err = br.QueryRow().Scan(&got, nil)
	} else {
		_, err = br.Exec()
	}
	var a idem.Attempt
	found := false
	consumed := true
	var reinvocationOf *string
	if err == nil {
		a, err = scanAttempt(prefixed{br.QueryRow(), []any{&res.Reserved, &consumed, &reinvocationOf}})
		found = err == nil
		if !got && errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return idem.ReserveResult{}, false, err
	}
	if !got {
		// Another transaction holds the key. A record committed before
		// this statement began answers (the holder only reads it, or
		// replaces a forgotten one); none means the holder's reservation
		// is not committed: busy. Anything the statement wrote without
		// the lock is not to be trusted, and the caller rolls it back.
		if found && !res.Reserved {
			return idem.ReserveResult{Attempt: a.Observe(now)}, false, nil
		}
		return idem.ReserveResult{}, true, nil
	}
	res.Attempt = a.Observe(now)
	if !res.Reserved {
		return res, false, nil
	}
	if !consumed {
		return idem.ReserveResult{}, false, idem.ErrApprovalNotConsumable
	}
	res.Execution = x
	res.Execution.ReinvocationOf = reinvocationOf
	return res, false, nil
}

// prefixed scans its first columns into first and the rest into the
// destinations it is given.
type prefixed struct {
	row   scanner
	first []any
}

func (p prefixed) Scan(dest ...any) error {
	return p.row.Scan(append(p.first[:len(p.first):len(p.first)], dest...)...)
}

// Complete stores the result if the record is still in flight under the
// caller's fencing token and lease, and finishes the execution, in one
// statement. Fencing tokens are unique, so the token picks the one row
// among the key's. Concurrent completions share that statement
// (completeSet); one whose events name another execution, and one the
// set statement did not complete, have one of their own (completeOne).
func (s *Store) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	headers, err := json.Marshal(idem.FilterReplayedHeaders(p.Headers))
	if err != nil {
		return idem.Attempt{}, err
	}
	if !ownEvents(p) {
		return s.completeOne(ctx, p, headers)
	}
	a, err := s.completions.Do(ctx, completion{p, headers})
	if errors.Is(err, errNotCompleted) {
		return s.completeOne(ctx, p, headers)
	}
	if err != nil {
		return idem.Attempt{}, interpretError(ctx, "complete", err)
	}
	return a, nil
}

// completeOne is Complete in a statement of its own (completeSQL), in the
// group commit of the other writes.
func (s *Store) completeOne(ctx context.Context, p idem.CompleteParams, headers []byte) (idem.Attempt, error) {
	var a idem.Attempt
	var now time.Time
	err := s.write(ctx, "complete", func(ctx context.Context, tx pgx.Tx) error {
		now = s.now() // when it runs: the lease is checked against it
		var err error
		a, err = completeTx(ctx, tx, p, headers, now)
		return err
	})
	if err != nil {
		return idem.Attempt{}, err
	}
	return a.Observe(now), nil
}

// completeTx completes the record in tx as Complete does, in one
// statement; headers are p.Headers filtered and encoded. When the fence
// or the lease fails, it is ErrFenced and nothing is written.
func completeTx(ctx context.Context, tx pgx.Tx, p idem.CompleteParams, headers []byte, now time.Time) (idem.Attempt, error) {
	var secretExpiresAt *time.Time
	if p.SealedKeyID != "" {
		t := now.Add(p.SecretWindow)
		secretExpiresAt = &t
	}
	fin := p.Finish
	ev, err := splitFinish(fin, now)
	if err != nil {
		return idem.Attempt{}, err
	}
	var notified int
	a, err := scanAttempt(prefixed{tx.QueryRow(ctx, completeSQL, p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken,
		string(idem.FinalState(p.Status)), p.Status, headers, p.Body, nullable(p.SealedKeyID), now, secretExpiresAt,
		string(fin.Outcome), nullable(string(fin.Code)), fin.Attempts,
		notifyPayload(p.Scope, p.Key), // signalled only if a waiter on another instance asked (Watch)
		ev.encoded, ev.named), []any{&notified}})
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Attempt{}, idem.ErrFenced
	}
	if err != nil {
		return idem.Attempt{}, err
	}
	return a, insertEvents(ctx, tx, p.Scope.Org, ev.rows(a.ExecutionID), now)
}

// GetAttempt reads the key's newest record; a forgotten one that is not
// removed yet is NOT_FOUND too. One statement, so no explicit transaction:
// one round trip.
func (s *Store) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	now := s.now()
	a, err := scanAttempt(s.pool.QueryRow(ctx, getAttemptSQL, p.Scope.Org, p.Scope.Principal, p.Key))
	if errors.Is(err, pgx.ErrNoRows) || err == nil && a.Forgotten(now) {
		return idem.Attempt{}, idem.Errorf(idem.CodeNotFound, "no attempt record for key %q", p.Key)
	}
	if err != nil {
		return idem.Attempt{}, interpretError(ctx, "get attempt", err)
	}
	if a.LeasePassed(now) {
		return s.settleLease(ctx, a)
	}
	return a.Observe(now), nil
}

// settleLockTimeout bounds how long settleLease waits for the row lock of
// a fenced effect in progress (CheckFence) before it answers the record as
// still in flight (Store.settleWait, which tests may change).
const settleLockTimeout = 2 * time.Second

// settleLease makes the passed lease of a, read in flight, durable before
// anyone is told (idem.Attempt.LeasePassed): one conditional UPDATE in a
// transaction of its own, outside group commit, so that its wait for an
// effect transaction holding the row (FOR SHARE, CheckFence) stalls no
// other caller. Either that effect committed first, and a reconcile read
// sees it, or its fence check fails once the mark commits. On lock
// timeout the record is answered as it was read: in flight, which is
// honest, and the caller retries. A record that changed meanwhile (its
// executor completed it, a sweeper or another reader marked it) is read
// again and answered as committed.
func (s *Store) settleLease(ctx context.Context, a idem.Attempt) (idem.Attempt, error) {
	var out idem.Attempt
	var busy bool
	err := s.inTx(ctx, "mark indeterminate", func(tx pgx.Tx) error {
		busy = false
		now := s.now()
		if _, err := tx.Exec(ctx, lockTimeoutSQL, fmt.Sprintf("%dms", s.settleWait.Milliseconds())); err != nil {
			return err
		}
		var err error
		out, err = scanAttempt(tx.QueryRow(ctx, markIndeterminateSQL, a.Scope.Org, a.Scope.Principal, a.Key, a.FencingToken, now))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			busy = true
			return err
		}
		if errors.Is(err, pgx.ErrNoRows) {
			out, err = scanAttempt(tx.QueryRow(ctx, getAttemptByTokenSQL, a.Scope.Org, a.Scope.Principal, a.Key, a.FencingToken))
			if errors.Is(err, pgx.ErrNoRows) {
				return idem.Errorf(idem.CodeNotFound, "no attempt record for key %q", a.Key)
			}
		}
		if err == nil {
			out = out.Observe(now)
		}
		return err
	})
	switch {
	case busy:
		return a, nil
	case err != nil:
		return idem.Attempt{}, err
	}
	return out, nil
}

// scanAttempt reads one record: org, principal, key, operation,
// fingerprint, state, execution_id, fencing_token, lease_expires_at,
// status, headers, body, sealed_key_id, created_at, completed_at,
// expires_at, secret_expires_at, attempts.
func scanAttempt(row scanner) (idem.Attempt, error) {
	var (
		a                                          idem.Attempt
		state                                      string
		status                                     *int
		headers                                    []byte
		sealedKeyID                                *string
		lease, created, completed, expires, secret *time.Time
		version                                    *int16
	)
	err := row.Scan(&a.Scope.Org, &a.Scope.Principal, &a.Key, &a.Operation, &a.Fingerprint, &state,
		&a.ExecutionID, &a.FencingToken, &lease, &status, &headers, &a.Body, &sealedKeyID,
		&created, &completed, &expires, &secret, &a.Attempts, &version)
	if err != nil {
		return idem.Attempt{}, err
	}
	if version != nil {
		a.FingerprintVersion = int(*version)
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
	err := s.pool.QueryRow(ctx, leaseLeftSQL, f.Scope.Org, f.Scope.Principal, f.Key, f.FencingToken).Scan(&lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, idem.ErrFenced
	}
	if err != nil {
		return 0, interpretError(ctx, "lease left", err)
	}
	return max(lease.Sub(s.now()), 0), nil
}
