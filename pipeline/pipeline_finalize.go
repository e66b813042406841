package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// finalizeTimeout bounds the store writes of finalization, which run even
// when the caller has gone.
const finalizeTimeout = 10 * time.Second

// outcome is how the handler stage (10 and 11) ended.
type outcome struct {
	status int
	header http.Header
	data   json.RawMessage
	err    *idem.Error
	// retried holds an execution.retried event per re-attempt.
	retried []idem.AuditEvent
	// raw: status, header and data are a raw operation's own answer.
	raw bool
	// notDispatched: err is certain to have had no effect (NotDispatched).
	notDispatched bool
}

// finalize runs stage 12 once: it builds the answer, completes the attempt
// record (keyed) or finishes the execution, with the final audit event.
func (x *execution) finalize(ctx context.Context, o outcome, fence int64) idem.Result {
	m := x.op.meta
	if o.notDispatched && x.key != "" {
		return x.release(ctx, o, fence)
	}
	if o.err != nil && x.key != "" && (o.err.Status >= 500 || o.err.Code == idem.CodeCancelled) {
		// The record is indeterminate now: a same-key retry can only say
		// so, so nothing about this answer is retryable.
		e := o.err.WithDetail("reconcile", reconcileName(m))
		e.Retryable = false
		if e.Status >= 500 && x.attempts > 0 {
			e.Message = mayHaveExecuted(m, e.Message)
		}
		o.err = e
	}
	resp, fin := x.answer(o)
	sctx, cancel := detached(ctx, finalizeTimeout)
	defer cancel()
	store := x.r.cfg.Store
	if x.unstarted != nil {
		x.r.audit.addExecution(idem.FinishedExecution{Start: *x.unstarted, StartedAt: x.start, Finish: fin, FinishedAt: x.r.cfg.Clock.Now()})
		return resp
	}
	if x.key == "" {
		if o.notDispatched {
			fin.ReturnApproval = x.approvalID // nothing ran (SPEC §8)
		}
		err := store.FinishExecution(sctx, fin)
		if err != nil {
			x.r.cfg.Logger.Error("finish execution", "executionId", x.executionID, "error", err)
		}
		return resp
	}
	status, stored, keyID, ok := x.sealIfSecret(resp)
	if !ok {
		// Unsealable: the record is left indeterminate; this caller still
		// gets the secret.
		status = http.StatusInternalServerError
	}
	done, err := store.Complete(sctx, idem.CompleteParams{
		Scope: x.inv.Principal.Scope(), Key: x.key, FencingToken: fence, Status: status, Headers: resp.Header,
		Body: stored, SealedKeyID: keyID, SecretWindow: x.r.cfg.SecretWindow, Finish: fin,
	})
	if err == nil {
		x.r.cache.put(done, x.r.cfg.Clock.Now())
	}
	x.r.done.finished(x.inv.Principal.Scope(), x.key)
	switch {
	case errors.Is(err, idem.ErrFenced):
		// The lease passed first: the record already reads indeterminate and
		// stays so. The execution is still finished.
		x.r.cfg.Logger.Warn("completion fenced: the lease passed before the result", "executionId", x.executionID)
		err := store.FinishExecution(sctx, fin)
		if err != nil {
			x.r.cfg.Logger.Error("finish execution", "executionId", x.executionID, "error", err)
		}
	case err != nil:
		// The record stays in flight and becomes indeterminate by lease.
		x.r.cfg.Logger.Error("complete attempt", "executionId", x.executionID, "error", err)
	}
	return resp
}

// release ends a keyed execution whose handler certainly had no effect
// (NotDispatched, with or without a raw answer of its own): the
// reservation is removed, so that the key is free again, and the approval
// it consumed is given back in the same transaction (SPEC §8: nothing
// ran), and the answer says the call may be sent again with it. Should
// the release fail (fenced: the lease passed first; or the store: a full
// disk refuses it as it refused the handler), the record stays held and
// becomes indeterminate by lease, so the answer is as for any keyed 5xx
// after the start (SPEC §6.4): not retryable, with the reconcile read; it
// says that nothing ran and that the key stays held.
func (x *execution) release(ctx context.Context, o outcome, fence int64) idem.Result {
	var e idem.Error
	if o.err != nil {
		e = *o.err
		e.Details = nil
		o.err = &e
	} else {
		// A raw answer saying the request was not run: should the
		// release fail, the caller is told so in a problem.
		e = *idem.Errorf(idem.CodeUpstreamUnavailable, "the upstream answered %d without running the request", o.status)
	}
	resp, fin := x.answer(o)
	fin.ReturnApproval = x.approvalID
	sctx, cancel := detached(ctx, finalizeTimeout)
	defer cancel()
	err := x.r.cfg.Store.Release(sctx, idem.ReleaseParams{Fence: idem.Fence{Scope: x.inv.Principal.Scope(), Key: x.key, FencingToken: fence}, Finish: fin})
	x.r.done.finished(x.inv.Principal.Scope(), x.key)
	if err != nil {
		x.r.cfg.Logger.Error("release reservation", "executionId", x.executionID, "error", err)
		e.Retryable = false
		e.Message += fmt.Sprintf("; nothing was executed, but idempotency key %q could not be released and stays held "+
			"(a same-key retry answers IDEMPOTENCY_KEY_IN_FLIGHT, then IDEMPOTENCY_RESULT_INDETERMINATE once its lease passes): "+
			"run %s to confirm, then send the call under a new key", x.key, reconcileOrRead(x.op.meta))
		held := e.WithDetail("reconcile", reconcileName(x.op.meta))
		return idem.ProblemResult(idem.NewProblem(held, x.meta()))
	}
	return resp
}

func reconcileOrRead(m idem.Metadata) string {
	if m.Retry.Reconcile != "" {
		return m.Retry.Reconcile
	}
	return "a read of the current state"
}

// answer builds the response to o and the execution's end, with the final
// audit event after o's execution.retried events.
func (x *execution) answer(o outcome) (idem.Result, idem.FinishParams) {
	meta := x.meta()
	var resp idem.Result
	final := idem.AuditEvent{ExecutionID: x.executionID, At: x.r.cfg.Clock.Now(), Attempts: x.attempts, DurationMs: x.r.cfg.Clock.Now().Sub(x.start).Milliseconds()}
	fin := idem.FinishParams{Org: x.inv.Principal.Org, ExecutionID: x.executionID, Attempts: x.attempts}
	if o.err == nil && o.raw {
		resp = x.rawResult(o.status, o.header, o.data)
		final.Type, fin.Outcome = idem.EventSucceeded, idem.OutcomeSucceeded
		if o.status >= 400 {
			final.Type, fin.Outcome = idem.EventFailed, idem.OutcomeFailed
		}
		final.Data = map[string]string{"status": strconv.Itoa(o.status)}
	} else if o.err == nil {
		h := http.Header{}
		for k, v := range o.header {
			h[k] = v
		}
		resp = idem.SuccessResult(o.status, h, o.data, meta)
		final.Type, fin.Outcome = idem.EventSucceeded, idem.OutcomeSucceeded
	} else {
		resp = idem.ProblemResult(idem.NewProblem(o.err, meta))
		final.Type, final.Code, fin.Outcome, fin.Code = idem.EventFailed, o.err.Code, idem.OutcomeFailed, o.err.Code
		if c := x.auditCause(); c != "" {
			final.Data = map[string]string{"cause": c}
		}
	}
	fin.Events = append(append(x.policyEvents(), o.retried...), final)
	return resp, fin
}

// sealIfSecret returns what the store keeps of resp: for a
// transactional_secret_replay success, its body sealed (keyID names the
// key); otherwise resp as is. ok is false when the secret could not be
// sealed: it must not reach the store in clear text.
func (x *execution) sealIfSecret(resp idem.Result) (status int, stored []byte, keyID string, ok bool) {
	if x.op.meta.Retry.Enforcement != idem.EnforceTransactionalSecretReplay || resp.Status >= 400 {
		return resp.Status, resp.Body(), "", true
	}
	sealed, id, err := x.r.cfg.Sealer.Seal(resp.Body(), x.aad())
	if err != nil {
		x.r.cfg.Logger.Error("seal secret result", "executionId", x.executionID, "error", err)
		return 0, nil, "", false
	}
	return resp.Status, sealed, id, true
}

// aad binds a sealed result to its record.
func (x *execution) aad() []byte {
	return []byte(x.inv.Principal.Org + "\x00" + x.inv.Principal.ID + "\x00" + x.key)
}

func reconcileName(m idem.Metadata) any {
	if m.Retry.Reconcile == "" {
		return nil
	}
	return m.Retry.Reconcile
}

// mayHaveExecuted is the message of a keyed 5xx after the handler started:
// the failure, then what it means for the caller.
func mayHaveExecuted(m idem.Metadata, failure string) string {
	reconcile := reconcileOrRead(m)
	return fmt.Sprintf("%s; the handler of %s had started, so the call may have executed: run %s to see whether it took effect "+
		"before deciding, and use a new key only if a new mutation is still needed (the same key never runs it again)", failure, m.Name, reconcile)
}

// appendCause appends what the execution's log line says of a handler's
// failure: cause, the message of the error it returned, and for a panic
// also panic (its value) and stack (the panicking goroutine's). The log is
// the operator's; the audit trail gets auditCause.
func (x *execution) appendCause(attrs []slog.Attr) []slog.Attr {
	if x.handlerErr == nil {
		return attrs
	}
	attrs = append(attrs, slog.String("cause", x.handlerErr.Error()))
	var p *handlerPanic
	if errors.As(x.handlerErr, &p) {
		attrs = append(attrs, slog.String("panic", fmt.Sprint(p.value)), slog.String("stack", string(p.stack)))
	}
	return attrs
}

// maxAuditCause bounds the text of an audit cause, in characters.
const maxAuditCause = 200

// Audit causes of a handler's failure that hold none of its text.
const (
	causePanicked = "the handler panicked; its value and stack are in this execution's log line (fields panic and stack)"
	causeGoError  = "the handler returned an error that is not an idem.Error; its message, which may hold input, is only in this execution's log line (field cause)"
)

// auditCause is the sanitized cause of a handler's failure that the final
// audit event carries as data.cause (docs/operations.md, "Failure
// causes"): for an *Error the handler returned, its code and message —
// text the handler wrote for callers, who read it in the answer — made
// printable and bounded (auditText); for any other error or a panic, a
// fixed sentence that points to the log line, since its text may hold
// input or secrets. Empty when the handler did not fail (a timeout, a
// cancellation or an output that breaks its schema has only its code).
func (x *execution) auditCause() string {
	var p *handlerPanic
	var e *idem.Error
	switch err := x.handlerErr; {
	case err == nil:
		return ""
	case errors.As(err, &p):
		return causePanicked
	case errors.As(err, &e):
		return auditText(string(e.Code) + ": " + e.Message)
	}
	return causeGoError
}

// auditText makes s fit an audit event and a console line: every control,
// format and line or paragraph separator character (NUL, newlines, tabs,
// bidirectional overrides) becomes a space, invalid UTF-8 becomes U+FFFD,
// and past maxAuditCause characters the rest is cut and "…" added.
func auditText(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s { // invalid UTF-8 reads as U+FFFD
		if n == maxAuditCause {
			b.WriteString("…")
			break
		}
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			r = ' '
		}
		b.WriteRune(r)
		n++
	}
	return strings.TrimSpace(b.String())
}
