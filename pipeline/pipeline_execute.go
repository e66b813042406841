package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// execute runs stages 10 to 13 for a reserved (fence != 0) or started
// execution.
func (x *execution) execute(ctx context.Context, in any, fence int64) idem.Result {
	if x.key != "" {
		// Reserved: a dropped connection no longer cancels the execution,
		// so that the same-key retry finds its result (SPEC §7).
		ctx = x.explicit
	}
	if ctx.Err() != nil {
		// Cancelled while the reservation was written: the handler never
		// starts, and the execution is finalized as CANCELLED.
		return x.finalize(ctx, outcome{err: cancelled()}, fence)
	}
	return x.finalize(ctx, x.runAttempts(ctx, in, fence), fence)
}

// runAttempts calls the handler, retrying only when SPEC §7 allows it and,
// for a reserved execution (fence != 0), only while its lease is held
// (SPEC §6.8, holdLease).
func (x *execution) runAttempts(ctx context.Context, in any, fence int64) outcome {
	m := x.op.meta
	var retried []idem.AuditEvent
	var prev *idem.Error // the error of the attempt before, once there is one
	for attempt := 1; ; attempt++ {
		if fence != 0 {
			if e := x.holdLease(ctx, attempt, fence, prev); e != nil {
				return outcome{err: e, retried: retried}
			}
		}
		if prev != nil {
			retried = append(retried, idem.AuditEvent{ExecutionID: x.executionID, Type: idem.EventRetried, At: x.r.cfg.Clock.Now(), Attempt: attempt, PreviousErrorCode: prev.Code})
		}
		x.attempts = attempt
		call := x.newCall(attempt, false)
		call.FencingToken, call.LeaseDeadline = fence, x.leaseDeadline
		out, err := x.runOne(ctx, call, in, x.op.Invoke)
		if err == nil && x.op.raw != nil {
			r := out.(idem.RawResponse)
			return outcome{status: r.Status, header: r.Header, data: r.Body, raw: true, retried: retried}
		}
		if idem.IsNotDispatched(err) {
			o := outcome{err: classify(m, err), notDispatched: true, retried: retried}
			if r, ok := out.(idem.RawResponse); ok && x.op.raw != nil && r.Status != 0 {
				// The upstream's own answer that it did not run the
				// request (idem proxy: a 429): the caller gets it.
				o.err, o.status, o.header, o.data, o.raw = nil, r.Status, r.Header, r.Body, true
			}
			return o
		}
		if err == nil {
			data, verr := x.encodeOutput(out)
			if verr != nil {
				return outcome{err: verr, retried: retried}
			}
			status := call.Status()
			if status == 0 {
				status = m.SuccessStatus
			}
			return outcome{status: status, header: call.ResponseHeader(), data: data, retried: retried}
		}
		e := classify(m, err)
		if !x.mayRetry(attempt, e, err) {
			return outcome{err: e, retried: retried}
		}
		wait := jitter(idem.MaxBackoff(m.RuntimeRetry.BackoffMs, attempt))
		if fence != 0 {
			// The backoff ends at the lease too: holdLease then refuses.
			wait = min(wait, time.Until(x.leaseDeadline.Add(-x.r.cfg.LeaseMargin)))
		}
		if wait > 0 && !sleep(ctx, wait) {
			return outcome{err: cancelled(), retried: retried}
		}
		prev = e
	}
}

// holdLease returns why attempt may not start, or nil: more than
// LeaseMargin of the lease must be left, by the monotonic deadline taken
// at the reservation and, before a runtime retry, by the store's clock
// (LeaseLeft), which also tightens the deadline. An attempt refused here
// never runs; the execution ends with a TIMEOUT and, like any keyed 5xx
// after the handler could have started, an indeterminate record.
func (x *execution) holdLease(ctx context.Context, attempt int, fence int64, prev *idem.Error) *idem.Error {
	margin := x.r.cfg.LeaseMargin
	if attempt > 1 {
		// Asking must not outlast the lease either.
		lctx, cancel := context.WithDeadline(ctx, x.leaseDeadline.Add(-margin))
		defer cancel()
		sent := time.Now()
		left, err := x.r.cfg.Store.LeaseLeft(lctx, idem.Fence{Scope: x.inv.Principal.Scope(), Key: x.key, FencingToken: fence})
		switch {
		case ctx.Err() != nil:
			return cancelled()
		case errors.Is(err, idem.ErrFenced), lctx.Err() != nil:
			left = 0
		case err != nil:
			e := idem.Errorf(idem.CodeTimeout, "attempt %d ended with %s, and the lease of idempotency key %q could not be confirmed before attempt %d (the store did not answer); attempt %d did not run", attempt-1, prev.Code, x.key, attempt, attempt)
			e.Err = err
			return e
		}
		if d := sent.Add(left); d.Before(x.leaseDeadline) {
			x.leaseDeadline = d
		}
	}
	if time.Until(x.leaseDeadline) > margin {
		return nil
	}
	if prev == nil {
		return idem.Errorf(idem.CodeTimeout, "the lease of idempotency key %q passed before attempt 1 could start (less than the lease margin of %s was left); the handler did not run", x.key, margin)
	}
	return idem.Errorf(idem.CodeTimeout, "attempt %d ended with %s, and the lease of idempotency key %q passed before attempt %d could start (less than the lease margin of %s was left); attempt %d did not run", attempt-1, prev.Code, x.key, attempt, margin, attempt)
}

func (x *execution) newCall(attempt int, dryRun bool) *idem.Call {
	return &idem.Call{
		Operation: x.op.meta.Name, ExecutionID: x.executionID, Attempt: attempt, Principal: x.inv.Principal,
		IdempotencyKey: "ik_" + x.executionID[len("exe_"):], RequestKey: x.key, DryRun: dryRun,
	}
}

// runOne runs one attempt under its own timeout. The caller's cancellation
// wins over everything; a result that arrives after the timeout or the
// cancellation is discarded.
//
// The attempt's context ends at its timeout or, for a reserved execution,
// LeaseMargin before its lease deadline, whichever comes first: the
// handler's context ends with the lease, whatever the timeout says.
func (x *execution) runOne(ctx context.Context, call *idem.Call, in any, fn func(context.Context, *idem.Call, any) (any, error)) (out any, err error) {
	if x.r.tracer != nil {
		var span trace.Span
		ctx, span = x.startAttempt(ctx, call)
		defer func() { x.endAttempt(span, out, err) }()
	}
	deadline, byLease := time.Now().Add(x.op.meta.Timeout), false
	if !call.LeaseDeadline.IsZero() {
		if end := call.LeaseDeadline.Add(-x.r.cfg.LeaseMargin); end.Before(deadline) {
			deadline, byLease = end, true
		}
	}
	ended := func() error {
		if byLease {
			return leaseEnded(x.op.meta, call)
		}
		return timedOut(x.op.meta)
	}
	actx, cancel := context.WithDeadline(idem.WithCall(ctx, call), deadline)
	defer cancel()
	x.handlerErr = nil
	if call.Transaction() != nil {
		// A transactional handler holds the store's transaction, so the
		// attempt waits for it to return whatever happens (its database
		// calls end with actx): it runs on this goroutine.
		return x.attemptResult(ctx, actx, invoke(actx, call, in, fn), ended)
	}
	done := make(chan attemptReturn, 1)
	go func() { done <- invoke(actx, call, in, fn) }()
	select {
	case res := <-done:
		return x.attemptResult(ctx, actx, res, ended)
	case <-actx.Done():
		if ctx.Err() != nil {
			return nil, cancelled()
		}
		return nil, ended()
	}
}

// attemptReturn is what a handler returned, or its panic as the error.
type attemptReturn struct {
	out any
	err error
}

// invoke calls the handler, its panic recovered.
func invoke(ctx context.Context, call *idem.Call, in any, fn func(context.Context, *idem.Call, any) (any, error)) (res attemptReturn) {
	defer func() {
		if v := recover(); v != nil {
			res = attemptReturn{err: &handlerPanic{value: v, stack: debug.Stack()}}
		}
	}()
	out, err := fn(ctx, call, in)
	return attemptReturn{out, err}
}

// attemptResult is the outcome of an attempt whose handler returned res:
// the caller's cancellation wins, then the end of the attempt's context
// (actx), and only then what the handler returned.
func (x *execution) attemptResult(ctx, actx context.Context, res attemptReturn, ended func() error) (any, error) {
	switch {
	case ctx.Err() != nil:
		return nil, cancelled()
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		return nil, ended()
	}
	x.handlerErr = res.err
	return res.out, res.err
}

// handlerPanic is a handler's panic, recovered: its value and the stack
// of the panicking goroutine, for the execution's log line.
type handlerPanic struct {
	value any
	stack []byte
}

func (p *handlerPanic) Error() string { return fmt.Sprintf("handler panicked: %v", p.value) }

func cancelled() *idem.Error {
	return idem.Errorf(idem.CodeCancelled, "the caller cancelled the execution")
}

func timedOut(m idem.Metadata) *idem.Error {
	return idem.Errorf(idem.CodeTimeout, "the attempt outlived its timeout of %s", m.Timeout)
}

// leaseEnded is the TIMEOUT of an attempt whose context ended with its
// lease, before its timeout. No retry follows: the lease is gone.
func leaseEnded(m idem.Metadata, call *idem.Call) *idem.Error {
	e := idem.Errorf(idem.CodeTimeout, "attempt %d reached the end of the lease of idempotency key %q before its timeout of %s", call.Attempt, call.RequestKey, m.Timeout)
	e.Retryable = false
	return e
}

// classify turns a handler error into the answer's error. An *Error passes
// as is (a declared business outcome when its status is below 500); a
// context error is TIMEOUT or CANCELLED; anything else is
// EXECUTION_FAILED, retryable only if the handler marked it so.
func classify(m idem.Metadata, err error) *idem.Error {
	var e *idem.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return timedOut(m)
	case errors.Is(err, context.Canceled):
		return cancelled()
	}
	out := idem.Errorf(idem.CodeExecutionFailed, "operation %s failed", m.Name)
	out.Retryable = idem.IsRetryable(err)
	out.Err = err
	return out
}

// mayRetry holds every condition of SPEC §7 for a runtime retry.
func (x *execution) mayRetry(attempt int, e *idem.Error, cause error) bool {
	m := x.op.meta
	switch {
	case attempt > m.RuntimeRetry.MaxAttempts:
		return false
	case !e.Retryable || e.Code == idem.CodeCancelled:
		return false
	case m.SideEffect.Writes() && !m.Idempotent:
		return false
	case m.RuntimeRetry.RetryOn != nil && !m.RuntimeRetry.RetryOn(cause):
		return false
	}
	return true
}

// jitter draws a wait in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d unless ctx ends first; it reports whether it waited.
func sleep(ctx context.Context, d time.Duration) bool {
	var never <-chan struct{}
	return wake(ctx, &never, d)
}

// wake waits d, or until *finished is closed (and then stops watching it),
// and reports false if ctx ended first.
func wake(ctx context.Context, finished *<-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-*finished:
		*finished = nil
		return true
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// encodeOutput marshals and validates the handler's output (stage 11).
func (x *execution) encodeOutput(out any) (json.RawMessage, *idem.Error) {
	data, err := json.Marshal(out)
	if err != nil {
		e := idem.Errorf(idem.CodeOutputInvalid, "operation %s produced output that cannot be encoded", x.op.meta.Name)
		e.Err = err
		return nil, e
	}
	if errs := x.op.ValidateOutput(data); len(errs) > 0 {
		e := idem.Errorf(idem.CodeOutputInvalid, "operation %s produced output that breaks its schema at %q: %s", x.op.meta.Name, errs[0].Path, errs[0].Message)
		return nil, e
	}
	return data, nil
}

// preview answers a dry run: the preview handler, no retries, nothing
// stored (SPEC §6.6).
func (x *execution) preview(ctx context.Context, in any) idem.Result {
	x.executionID = newID("exe_", x.r.cfg.Clock.Now())
	x.attempts = 1
	out, err := x.runOne(ctx, x.newCall(1, true), in, x.op.Preview)
	meta := x.meta()
	meta.DryRun = true
	if err != nil {
		return idem.ProblemResult(idem.NewProblem(classify(x.op.meta, err), meta))
	}
	if raw, ok := out.(idem.RawResponse); ok && x.op.raw != nil {
		return idem.RawResult(raw.Status, raw.Header, raw.Body, meta)
	}
	data, jerr := json.Marshal(out)
	if jerr != nil {
		e := idem.Errorf(idem.CodeOutputInvalid, "the preview of %s cannot be encoded", x.op.meta.Name)
		e.Err = jerr
		return idem.ProblemResult(idem.NewProblem(e, meta))
	}
	return idem.SuccessResult(http.StatusOK, http.Header{}, data, meta)
}
