package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// answerExisting answers from an attempt record (stage 5, or stage 8 when a
// record appeared concurrently), after waiting on an in-flight record of
// this request when the caller asked to (Prefer: wait).
func (x *execution) answerExisting(ctx context.Context, a idem.Attempt) idem.Result {
	if a.State == idem.AttemptInFlight && x.sameIntent(a) && x.inv.Wait > 0 {
		return x.waitAndAnswer(ctx, a)
	}
	return x.answerRecord(ctx, a)
}

// answerRecord answers from an attempt record as it stands.
func (x *execution) answerRecord(ctx context.Context, a idem.Attempt) idem.Result {
	m := x.op.meta
	if !x.sameIntent(a) {
		parts := "method, path, query or body"
		if slices.ContainsFunc(x.op.params, func(p idem.Param) bool { return p.In == "header" }) {
			parts = "method, path, query, header inputs or body"
		}
		return x.fail(idem.Errorf(idem.CodeIdempotencyKeyReused, "idempotency key %q already names a different request (%s differ); use a new key for a new intent", x.key, parts))
	}
	switch a.State {
	case idem.AttemptInFlight:
		return x.fail(idem.Errorf(idem.CodeIdempotencyKeyInFlight, "the request with idempotency key %q is still running; retry with the same key after Retry-After, or send Prefer: wait=N", x.key))
	case idem.AttemptIndeterminate:
		return x.fail(idem.Errorf(idem.CodeIdempotencyResultIndeterminate, "nobody can prove whether the request with idempotency key %q took effect; run %s and use a new key only if a new mutation is still needed", x.key, m.Retry.Reconcile).
			WithDetail("reconcile", reconcileName(m)).WithDetail("executionId", a.ExecutionID))
	case idem.AttemptExpired:
		return x.fail(idem.Errorf(idem.CodeIdempotencyResultExpired, "the one-time result of idempotency key %q is no longer kept; run %s to find what it created", x.key, m.Retry.Reconcile).
			WithDetail("reconcile", reconcileName(m)).WithDetail("executionId", a.ExecutionID))
	}
	return x.replay(ctx, a)
}

// replay answers with the stored result, marked as a replay.
func (x *execution) replay(ctx context.Context, a idem.Attempt) idem.Result {
	stored := a.Body
	if a.SealedKeyID != "" {
		plain, err := x.r.cfg.Sealer.Open(a.Body, x.aad(), a.SealedKeyID)
		if err != nil {
			e := idem.Errorf(idem.CodeInternal, "the stored secret result cannot be opened (the server's secret key changed?); run %s", x.op.meta.Retry.Reconcile)
			e.Err = err
			return x.fail(e)
		}
		stored = plain
	}
	h := a.Headers // shared, read-only: the surface renders its own headers
	scope := x.inv.Principal.Scope()
	if x.op.raw != nil {
		x.noteReplay(a)
		meta := x.meta()
		meta.Attempts = a.Attempts
		meta.Idempotency.Replayed = true
		res := idem.RawResult(a.Status, h, stored, meta)
		res.Replayed = true
		return res
	}
	var res idem.Result
	if x.kept != nil && x.keptOf == a.ExecutionID {
		res = *x.kept
		res.Status, res.Header = a.Status, h
	} else {
		var err error
		if res, err = idem.ReplayResult(a.Status, h, stored, x.key); err != nil {
			e := idem.Errorf(idem.CodeInternal, "the stored result of idempotency key %q is unreadable", x.key)
			e.Err = err
			return x.fail(e)
		}
		if res.Problem == nil && a.SealedKeyID == "" {
			x.r.cache.keepReplay(scope, x.key, a.ExecutionID, res)
		}
	}
	x.noteReplay(a)
	return res
}

// noteReplay records that a's result was replayed: the execution the
// answer names, and its execution.replayed event (written off the
// request's path).
func (x *execution) noteReplay(a idem.Attempt) {
	x.executionID = a.ExecutionID
	x.r.audit.add(a.Scope.Org, idem.AuditEvent{ExecutionID: a.ExecutionID, Type: idem.EventReplayed, At: x.r.cfg.Clock.Now(), Data: map[string]string{"status": strconv.Itoa(a.Status)}})
}

// waitAndAnswer honours Prefer: wait on an in-flight record: it polls the
// record until it is final or the wait (capped) passes, then answers as
// usual, saying which wait it applied. Beyond Config.MaxWaiters waiting
// at once, it answers at once, without the preference. A waiter lets its
// body go: the fingerprint is all it compares.
func (x *execution) waitAndAnswer(ctx context.Context, a idem.Attempt) idem.Result {
	release := x.r.waiters.take(ctx, 1, 0)
	if release == nil {
		return x.answerRecord(ctx, a)
	}
	defer release()
	x.versionOne() // while the body is here: a record read later may need it
	x.inv.Intent.Body, x.canon = nil, nil
	wait := min(x.inv.Wait, x.r.cfg.MaxWait)
	deadline := time.Now().Add(wait)
	// A key this instance runs wakes its waiters when it finishes, and so
	// does one another instance runs when the store has a CompletionFeed
	// (PostgreSQL); the record is polled too, backing off, in case a
	// signal is missed.
	finished, stop, watch := x.r.done.wait(x.inv.Principal.Scope(), x.key)
	defer stop()
	if feed, ok := x.r.cfg.Store.(idem.CompletionFeed); ok && watch {
		_ = feed.Watch(ctx, x.inv.Principal.Scope(), x.key) // best effort: polling remains
	}
	for poll := 10 * time.Millisecond; a.State == idem.AttemptInFlight && time.Now().Before(deadline); poll = min(poll*2, 250*time.Millisecond) {
		if !wake(ctx, &finished, min(poll, time.Until(deadline))) {
			break
		}
		next, err := x.readRecord(ctx, x.key)
		if err != nil {
			if errors.Is(err, idem.ErrNotFound) && x.uncommitted && finished == nil {
				// The transactional execution ahead ran here and has
				// ended (its signal came) with nothing committed: the key
				// is free, and waiting longer would find nothing.
				resp := x.fail(idem.Errorf(idem.CodeIdempotencyKeyInFlight, "the request with idempotency key %q ahead of this one committed nothing, and the key is free again; send this request again with the same key", x.key))
				resp.WaitApplied = wait
				return resp
			}
			if errors.Is(err, idem.ErrNotFound) && x.uncommitted {
				continue // not committed yet (or rolled back on another instance)
			}
			if errors.Is(err, idem.ErrNotFound) {
				break
			}
			return x.fail(storeFailure(ctx, err))
		}
		a = next
	}
	resp := x.answerRecord(ctx, a)
	resp.WaitApplied = wait
	return resp
}
