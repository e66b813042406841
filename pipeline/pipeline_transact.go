package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"errors"
	"time"
)

// transact runs stages 8 to 12 of a transactional operation (SPEC §6.7) in
// one transaction of the store (Transactor): the reservation (or unkeyed
// start) with its approval, the handler's writes, the completion and the
// audit events commit together, or nothing does. So a failure answers
// retryable, with the key free again, where a two-phase operation's would
// be indeterminate.
func (x *execution) transact(ctx context.Context, in any, start idem.StartParams, raw []byte, reason string, releaseExecution func()) idem.Result {
	r, m := x.r, x.op.meta
	scope := x.inv.Principal.Scope()
	lease := m.Lease(r.cfg.LeaseGrace)
	p := idem.ReserveParams{StartParams: start}
	if x.key != "" {
		p.Key, p.Lease, p.Retention = x.key, lease, r.cfg.Retention
	}
	// The caller's cancellation ends the handler (and so rolls everything
	// back); a dropped connection does too, except for a keyed call, which
	// keeps running once reserved so that the same-key retry finds its
	// result. The transaction itself runs detached, so that its outcome is
	// known.
	cancelling := ctx
	if x.key != "" {
		cancelling = x.explicit
	}
	tctx, cancel := detached(ctx, lease+finalizeTimeout)
	defer cancel()
	// What the transaction's function leaves, in one value (the function
	// captures it once).
	var ran struct {
		ok    bool
		resp  idem.Result
		asked idem.TxOutcome
		fin   idem.FinishParams // the execution's end, for the audit of an aborted one
	}
	t0 := time.Now()
	res, err := r.cfg.Store.(idem.Transactor).Transact(tctx, p, func(sctx context.Context, tx any) idem.TxOutcome {
		ran.ok = true
		x.executionID = start.ExecutionID
		if x.key != "" {
			x.leaseDeadline = t0.Add(lease)
			r.done.started(scope, x.key)
		}
		ran.resp, ran.asked, ran.fin = x.runInTx(sctx, cancelling, in, tx)
		return ran.asked
	})
	resp, asked, fin := ran.resp, ran.asked, ran.fin
	if ran.ok && x.key != "" {
		defer r.done.finished(scope, x.key)
	}
	switch {
	case errors.Is(err, idem.ErrKeyBusy):
		// Held by a transaction not committed yet: in flight, and a wait
		// must not give up when it finds no record.
		x.uncommitted = true
		return x.notReserved(ctx, idem.Attempt{Scope: scope, Key: x.key, Fingerprint: x.fingerprint, State: idem.AttemptInFlight}, releaseExecution)
	case err != nil && !ran.ok:
		return x.startFailure(ctx, err, raw, reason)
	case err != nil:
		// The handler ran; the completion or the commit failed. Whether it
		// committed is unknown only if the commit was cut off, and a
		// same-key retry is safe either way: it replays what committed, or
		// runs afresh.
		r.cfg.Logger.Error("transactional execution: commit", "executionId", x.executionID, "error", err)
		var e *idem.Error
		if !errors.As(err, &e) || e.Code == idem.CodeStoreUnavailable {
			e = idem.Unavailable("store", err)
			e.Message = "the store failed while committing this transactional execution; " + x.resendAdvice()
		}
		return x.fail(e) // any other code (INTERNAL: a statement refused for its data) as the store said
	case !res.Reserved:
		return x.notReserved(ctx, res.Attempt, releaseExecution)
	case res.Committed:
		if x.key != "" {
			r.cache.put(res.Attempt, r.cfg.Clock.Now())
		}
		return resp
	}
	// Rolled back: nothing of it remains but its audit, written now.
	if !asked.Abort {
		// The store refused the completion: the lease passed meanwhile.
		e := idem.Errorf(idem.CodeTimeout, "the lease of idempotency key %q passed before the transaction could commit; nothing was committed: %s", x.key, x.resendAdvice())
		e.Retryable = true
		resp, fin = x.answer(outcome{err: e})
	}
	x.auditAborted(ctx, start, fin)
	return resp
}

// runInTx is the handler stage of a transactional execution, inside the
// store's transaction tx: one attempt (SPEC §6.7 leaves retrying to the
// caller, whose key is free again), then the answer and what the store
// keeps of it. A failure (5xx, timeout, cancellation) asks for Abort and
// answers retryable; a declared business error (4xx) undoes the handler's
// writes and is stored as the answer.
func (x *execution) runInTx(ctx, cancelling context.Context, in any, tx any) (idem.Result, idem.TxOutcome, idem.FinishParams) {
	r, m := x.r, x.op.meta
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(cancelling, cancel)()
	x.attempts = 1
	call := x.newCall(1, false)
	call.LeaseDeadline = x.leaseDeadline
	idem.WithTransaction(call, tx)
	var o outcome
	switch {
	case cancelling.Err() != nil:
		o.err = cancelled()
	case x.key != "":
		o.err = x.holdLease(hctx, 1, 0, nil)
	}
	if o.err == nil {
		out, err := x.runOne(hctx, call, in, x.op.Invoke)
		if err != nil {
			o.err = classify(m, err)
		} else if o.data, o.err = x.encodeOutput(out); o.err == nil {
			o.status, o.header = call.Status(), call.ResponseHeader()
			if o.status == 0 {
				o.status = m.SuccessStatus
			}
		}
	}
	if o.err != nil && (o.err.Status >= 500 || o.err.Code == idem.CodeCancelled) {
		return x.abort(o.err)
	}
	resp, fin := x.answer(o)
	result := idem.CompleteParams{Headers: resp.Header, SecretWindow: r.cfg.SecretWindow, Finish: fin}
	if x.key != "" {
		var ok bool
		if result.Status, result.Body, result.SealedKeyID, ok = x.sealIfSecret(resp); !ok {
			return x.abort(idem.Errorf(idem.CodeInternal, "the secret result could not be sealed for replay"))
		}
	}
	return resp, idem.TxOutcome{Undo: o.err != nil, Result: result}, fin
}

// abort answers e for a transactional execution rolled back whole: nothing
// happened, so it is retryable.
func (x *execution) abort(e *idem.Error) (idem.Result, idem.TxOutcome, idem.FinishParams) {
	c := *e
	c.Retryable = true
	c.Message += "; nothing was committed (the operation is transactional): " + x.resendAdvice()
	resp, fin := x.answer(outcome{err: &c})
	return resp, idem.TxOutcome{Abort: true}, fin
}

// resendAdvice tells the caller of a transactional execution that failed
// how to retry it.
func (x *execution) resendAdvice() string {
	if x.key != "" {
		return "send the same request again with the same idempotency key"
	}
	return "send the request again"
}

// auditAborted records an execution that was rolled back, so that the
// audit trail shows the failure: an execution without key, record or
// approval, and its final event.
func (x *execution) auditAborted(ctx context.Context, start idem.StartParams, fin idem.FinishParams) {
	sctx, cancel := detached(ctx, finalizeTimeout)
	defer cancel()
	start.ApprovalID = "" // not consumed: it rolled back with the rest
	store := x.r.cfg.Store
	_, err := store.StartExecution(sctx, start)
	if err == nil {
		err = store.FinishExecution(sctx, fin)
	}
	if err != nil {
		x.r.cfg.Logger.Error("audit of a rolled-back execution", "executionId", x.executionID, "error", err)
	}
}
