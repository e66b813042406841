package pipeline

// Tracing (Config.TracerProvider): OpenTelemetry spans for a call,
// its store phases and its handler attempts. The pipeline calls in here
// behind one check of Runner.tracer, which is nil when tracing is off: then
// no span is started and no attribute is built.
//
// What a span may carry: the operation, the principal's kind, the answer's
// status and code, the execution, whether it replayed, the idempotency
// state, the attempt. Never the idempotency key, the inputs, the results,
// the principal's or org's id, nor an error's message (messages may quote
// the key or an input): errors are recorded by their code.

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
)

// tracerName is the instrumentation scope of idem's spans.
const tracerName = "github.com/idem-run/idem"

// The span names.
const (
	spanCall    = "idem.call" // + " " + the operation's name, once resolved
	spanAttempt = "idem.attempt"
	spanStore   = "idem.store." // + the store method (idem.StoreHook): idem.store.reserve, …
)

// The attributes, all in the idem. namespace.
const (
	attrOperation     = attribute.Key("idem.operation")
	attrSurface       = attribute.Key("idem.surface")
	attrPrincipalKind = attribute.Key("idem.principal.kind")
	attrOutcome       = attribute.Key("idem.outcome")
	attrStatus        = attribute.Key("idem.status")
	attrCode          = attribute.Key("idem.code")
	attrRetryable     = attribute.Key("idem.retryable")
	attrExecutionID   = attribute.Key("idem.execution_id")
	attrReplayed      = attribute.Key("idem.replayed")
	attrState         = attribute.Key("idem.idempotency.state")
	attrDryRun        = attribute.Key("idem.dry_run")
	attrAttempts      = attribute.Key("idem.attempts")
	attrAttempt       = attribute.Key("idem.attempt")
	attrStoreResult   = attribute.Key("idem.store.result")
	// attrPolicies are stage 6's decisions ("rule=outcome"), attrRule the
	// configured rule that denied the call or asked for its approval.
	attrPolicies = attribute.Key("idem.policy.decisions")
	attrRule     = attribute.Key("idem.policy.rule")
	// attrErrorType is OpenTelemetry's error.type: the code of a failure.
	attrErrorType = attribute.Key("error.type")
)

// The values of idem.outcome, those of the metrics' outcome label.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeReplayed  = "replayed"
)

// The values of idem.idempotency.state: what the call found of its key's
// record, or did with it.
const (
	stateUnkeyed       = "unkeyed"       // no key (or one ignored: fresh_read)
	stateNew           = "new"           // the call reserved the key and ran
	stateReplayed      = "replayed"      // a completed record answered
	stateInFlight      = "in_flight"     // the key's execution was still running
	stateIndeterminate = "indeterminate" // the record is indeterminate
	stateExpired       = "expired"       // a secret result past its window
	stateReused        = "reused"        // the key names another request
	stateUnreserved    = "unreserved"    // answered before any reservation: the key is not consumed
)

// startCall starts the span of a call, a child of the span ctx carries:
// the surface's own server span (the HTTP request's, the MCP tool call's),
// or the caller's from a traceparent. Its kind is server for a call that
// came over the wire with no server span of this process above it (a
// surface mounted without server.Handler's instrumentation), internal
// otherwise and for the Go API's.
func (x *execution) startCall(ctx context.Context) (context.Context, trace.Span) {
	name := spanCall
	attrs := make([]attribute.KeyValue, 0, 3)
	if op, ok := x.r.decl.Load().ops[x.inv.Operation]; ok {
		// An unknown name stays out: it is the caller's, of any length.
		name += " " + op.meta.Name
		attrs = append(attrs, attrOperation.String(op.meta.Name))
	}
	kind := trace.SpanKindInternal
	if x.inv.Surface != "" {
		if parent := trace.SpanContextFromContext(ctx); !parent.IsValid() || parent.IsRemote() {
			kind = trace.SpanKindServer
		}
		attrs = append(attrs, attrSurface.String(string(x.inv.Surface)))
	}
	attrs = append(attrs, attrPrincipalKind.String(string(x.inv.Principal.Kind)))
	return x.r.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// endCall ends a call's span with its answer.
func (x *execution) endCall(span trace.Span, resp idem.Result) {
	if !span.IsRecording() {
		span.End() // sampled out, or a no-op provider: nothing to build
		return
	}
	outcome, attempts := outcomeSucceeded, x.attempts
	switch {
	case resp.Replayed:
		outcome, attempts = outcomeReplayed, 0
	case resp.Problem != nil || resp.Status >= 400:
		outcome = outcomeFailed
	}
	attrs := []attribute.KeyValue{
		attrOutcome.String(outcome), attrStatus.Int(resp.Status), attrReplayed.Bool(resp.Replayed),
		attrState.String(x.idempotencyState(resp)), attrDryRun.Bool(x.inv.DryRun), attrAttempts.Int(attempts),
	}
	if x.executionID != "" {
		attrs = append(attrs, attrExecutionID.String(x.executionID))
	}
	if resp.Problem != nil {
		attrs = append(attrs, attrCode.String(string(resp.Problem.Code)), attrErrorType.String(string(resp.Problem.Code)))
	}
	if len(x.policyLog) > 0 {
		attrs = append(attrs, attrPolicies.StringSlice(x.policyLog))
	}
	if rule := x.rule(resp); rule != "" {
		attrs = append(attrs, attrRule.String(rule))
	}
	span.SetAttributes(attrs...)
	if resp.Status >= 500 {
		// A server's failure; a 4xx is the caller's (OpenTelemetry's
		// convention for server spans), told by idem.code.
		desc := ""
		if resp.Problem != nil {
			desc = string(resp.Problem.Code)
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}

// idempotencyState is the idem.idempotency.state of a call answered resp.
func (x *execution) idempotencyState(resp idem.Result) string {
	switch {
	case x.key == "":
		return stateUnkeyed
	case resp.Replayed:
		return stateReplayed
	case resp.Problem != nil:
		switch resp.Problem.Code {
		case idem.CodeIdempotencyKeyInFlight:
			return stateInFlight
		case idem.CodeIdempotencyResultIndeterminate:
			return stateIndeterminate
		case idem.CodeIdempotencyResultExpired:
			return stateExpired
		case idem.CodeIdempotencyKeyReused:
			return stateReused
		}
	}
	if x.executionID != "" {
		// Set at the reservation, and cleared when it was not taken.
		return stateNew
	}
	return stateUnreserved
}

// startAttempt starts the span of one handler attempt, the span the
// handler's ctx carries. Runtime retries are its siblings.
func (x *execution) startAttempt(ctx context.Context, call *idem.Call) (context.Context, trace.Span) {
	return x.r.tracer.Start(ctx, spanAttempt, trace.WithAttributes(
		attrOperation.String(call.Operation), attrExecutionID.String(call.ExecutionID),
		attrAttempt.Int(call.Attempt), attrDryRun.Bool(call.DryRun),
	))
}

// endAttempt ends an attempt's span with what the handler returned (a
// panic arrives as an error): a failure by its code, as an error when it
// is the server's (5xx).
func (x *execution) endAttempt(span trace.Span, out any, err error) {
	switch {
	case !span.IsRecording():
	case err != nil:
		e := classify(x.op.meta, err)
		span.SetAttributes(attrCode.String(string(e.Code)), attrErrorType.String(string(e.Code)), attrStatus.Int(e.Status))
		recordError(span, e.Code, e.Retryable)
		if e.Status >= 500 {
			span.SetStatus(codes.Error, string(e.Code))
		}
	default:
		if raw, ok := out.(idem.RawResponse); ok {
			span.SetAttributes(attrStatus.Int(raw.Status))
			if raw.Status >= 500 {
				span.SetAttributes(attrErrorType.String(strconv.Itoa(raw.Status)))
				span.SetStatus(codes.Error, "")
			}
		}
	}
	span.End()
}

// recordError adds the exception event of OpenTelemetry's conventions,
// typed by the code and without a message.
func recordError(span trace.Span, code idem.Code, retryable bool) {
	span.AddEvent("exception", trace.WithAttributes(
		attribute.String("exception.type", string(code)), attrCode.String(string(code)), attrRetryable.Bool(retryable),
	))
}

// storeSpans is the StoreHook of the runner's spans: one per store call
// made inside a call's span, its child; the store gets the span's context,
// so that an instrumented driver's spans nest under it. A store call
// outside any span (the sweeper, the audit queue, the surfaces' reads)
// makes none. nil when tracing is off.
func (r *Runner) storeSpans() idem.StoreHook {
	if r.tracer == nil {
		return nil
	}
	return func(ctx context.Context, method string) (context.Context, func(error)) {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return ctx, endNothing
		}
		ctx, span := r.tracer.Start(ctx, spanStore+method)
		return ctx, func(err error) { endStore(span, err) }
	}
}

func endNothing(error) {}

// endStore ends a store call's span: the answers that the pipeline
// expects (no record, a record or an approval in the way) are results; any
// other error is a failure, by its code.
func endStore(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		result, failed := storeResult(err)
		span.SetAttributes(attrStoreResult.String(result))
		if failed {
			span.SetAttributes(attrErrorType.String(result))
			span.AddEvent("exception", trace.WithAttributes(attribute.String("exception.type", result)))
			span.SetStatus(codes.Error, result)
		}
	}
	span.End()
}

// storeResult names a store call's error for its span, and says whether it
// is a failure.
func storeResult(err error) (string, bool) {
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return "not_found", false
	case errors.Is(err, idem.ErrAttemptExists):
		return "attempt_exists", false
	case errors.Is(err, idem.ErrKeyBusy):
		return "key_busy", false
	case errors.Is(err, idem.ErrApprovalNotConsumable):
		return "approval_not_consumable", false
	case errors.Is(err, idem.ErrFenced):
		return "fenced", true
	}
	return string(idem.ErrorCode(err)), true
}

// Tracing reports whether the runner traces its calls
// (Config.TracerProvider is set). The surfaces take the caller's
// trace context (W3C traceparent) into a call's context only then.
func (r *Runner) Tracing() bool { return r.tracer != nil }

// rule is the configured rule that decided the call: the one an answer
// names, or the one that asked for its approval.
func (x *execution) rule(resp idem.Result) string {
	if resp.Problem != nil {
		if r, ok := resp.Problem.Details["rule"].(string); ok {
			return r
		}
	}
	if x.approval != nil {
		return x.approval.Rule
	}
	return ""
}
