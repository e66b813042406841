package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
)

// traced is a fixture whose runner records its spans.
type traced struct {
	*fixture
	rec *tracetest.SpanRecorder
}

func newTraced(t *testing.T, ops []idem.Operation) *traced {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, ops, func(c *pipeline.Config) { c.TracerProvider = tp })
	return &traced{fixture: f, rec: rec}
}

// spans returns the ended spans of trace id, by name, in the order they
// started.
func (tr *traced) spans(id trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	ended := tr.rec.Ended()
	slices.SortStableFunc(ended, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		if s.SpanContext().TraceID() == id {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

// callSpan returns the one call span of the last call named op.
func (tr *traced) callSpan(t *testing.T, op string) sdktrace.ReadOnlySpan {
	t.Helper()
	var last sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == "idem.call "+op {
			last = s
		}
	}
	if last == nil {
		t.Fatalf("no span idem.call %s among %v", op, names(tr.rec.Ended()))
	}
	return last
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// wantAttrs checks that s has each attribute of want, with its value.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]any) {
	t.Helper()
	have := attrs(s)
	for k, v := range want {
		got, ok := have[k]
		if !ok {
			t.Errorf("span %s: no attribute %s (has %v)", s.Name(), k, s.Attributes())
			continue
		}
		if fmt.Sprint(got.AsInterface()) != fmt.Sprint(v) {
			t.Errorf("span %s: %s = %v, want %v", s.Name(), k, got.AsInterface(), v)
		}
	}
}

// tracedCreate is thing.create whose handler reports the span its ctx
// carries; a name starting with "fail-" is a declared 409 whose message
// quotes the name, one starting with "panic-" panics.
func tracedCreate(seen chan<- trace.SpanContext) idem.Operation {
	return idem.Define(createMeta(), func(ctx context.Context, call *idem.Call, in createIn) (thing, error) {
		seen <- trace.SpanFromContext(ctx).SpanContext()
		switch {
		case strings.HasPrefix(in.Name, "fail-"):
			return thing{}, idem.Errorf(codeThingExists, "a thing named %q exists", in.Name)
		case strings.HasPrefix(in.Name, "panic-"):
			panic("the handler broke on " + in.Name)
		}
		return thing{ID: "t_" + in.Name, Name: in.Name}, nil
	})
}

func TestTracingKeyedCallAndReplay(t *testing.T) {
	seen := make(chan trace.SpanContext, 1)
	tr := newTraced(t, []idem.Operation{tracedCreate(seen), showOp()})
	first := tr.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"})
	d := expect(t, first, http.StatusCreated, "")
	handlerSpan := <-seen

	callSpan := tr.callSpan(t, "thing.create")
	if callSpan.SpanKind() != trace.SpanKindInternal || callSpan.Parent().IsValid() {
		t.Errorf("a Go API call span is %s with parent %v, want internal and a root", callSpan.SpanKind(), callSpan.Parent())
	}
	wantAttrs(t, callSpan, map[attribute.Key]any{
		"idem.operation": "thing.create", "idem.principal.kind": "agent", "idem.outcome": "succeeded", "idem.status": 201,
		"idem.execution_id": d.Meta.ExecutionID, "idem.replayed": false, "idem.idempotency.state": "new",
		"idem.dry_run": false, "idem.attempts": 1,
	})
	if callSpan.Status().Code != codes.Unset {
		t.Errorf("call span status = %v", callSpan.Status())
	}
	spans := tr.spans(callSpan.SpanContext().TraceID())
	// The store phases and the attempt, each a child of the call span, in
	// the pipeline's order.
	var order []string
	for _, s := range tr.rec.Ended() {
		if s.SpanContext().TraceID() == callSpan.SpanContext().TraceID() && s.Parent().SpanID() == callSpan.SpanContext().SpanID() {
			order = append(order, s.Name())
		}
	}
	slices.SortFunc(order, func(a, b string) int { return spans[a][0].StartTime().Compare(spans[b][0].StartTime()) })
	// No stage-5 read: without a policy or an approval, the reservation
	// reads the key (issue 36 item 2).
	if want := []string{"idem.store.reserve", "idem.attempt", "idem.store.complete"}; !slices.Equal(order, want) {
		t.Fatalf("children of the call span = %v, want %v", order, want)
	}
	// With a policy, stage 5 reads the key first; finding nothing is no
	// error.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	allow := idem.Policy{Name: "allow", Evaluate: func(context.Context, idem.PolicyInput) (idem.PolicyDecision, error) {
		return idem.PolicyDecision{Effect: idem.Allow}, nil
	}}
	withPolicy := &traced{rec: rec, fixture: newFixture(t, []idem.Operation{tracedCreate(make(chan trace.SpanContext, 1)), showOp()},
		func(c *pipeline.Config) { c.TracerProvider, c.Policies = tp, []idem.Policy{allow} })}
	expect(t, withPolicy.do(t.Context(), call{op: "thing.create", body: `{"name":"p"}`, key: "k-policy"}), http.StatusCreated, "")
	read := withPolicy.spans(withPolicy.callSpan(t, "thing.create").SpanContext().TraceID())["idem.store.get_attempt"]
	if len(read) != 1 {
		t.Fatalf("%d stage-5 reads with a policy, want 1", len(read))
	}
	wantAttrs(t, read[0], map[attribute.Key]any{"idem.store.result": "not_found"})
	if read[0].Status().Code != codes.Unset {
		t.Errorf("a key's first read, which finds nothing, is %v", read[0].Status())
	}
	attempt := spans["idem.attempt"][0]
	wantAttrs(t, attempt, map[attribute.Key]any{"idem.attempt": 1, "idem.execution_id": d.Meta.ExecutionID, "idem.operation": "thing.create"})
	if !handlerSpan.Equal(attempt.SpanContext()) {
		t.Errorf("the handler's ctx carries span %v, the attempt is %v", handlerSpan, attempt.SpanContext())
	}

	// The replay: no attempt, the original execution.
	again := tr.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"})
	if !again.Replayed {
		t.Fatalf("same key again = %d %s", again.Status, again.Body())
	}
	replay := tr.callSpan(t, "thing.create")
	if replay.SpanContext().TraceID() == callSpan.SpanContext().TraceID() {
		t.Fatal("the replay is in the first call's trace")
	}
	wantAttrs(t, replay, map[attribute.Key]any{
		"idem.outcome": "replayed", "idem.replayed": true, "idem.idempotency.state": "replayed",
		"idem.execution_id": d.Meta.ExecutionID, "idem.attempts": 0, "idem.status": 201,
	})
	if n := len(tr.spans(replay.SpanContext().TraceID())["idem.attempt"]); n != 0 {
		t.Errorf("the replay ran %d attempt spans", n)
	}
	select {
	case <-seen:
		t.Fatal("the handler ran for the replay")
	default:
	}
}

func TestTracingIdempotencyStates(t *testing.T) {
	seen := make(chan trace.SpanContext, 8)
	tr := newTraced(t, []idem.Operation{tracedCreate(seen), showOp()})
	tests := []struct {
		name  string
		call  call
		state string
		code  idem.Code
	}{
		{"unkeyed", call{op: "thing.create", body: `{"name":"u"}`, principal: browser}, "unkeyed", ""},
		{"first", call{op: "thing.create", body: `{"name":"b"}`, key: "k2"}, "new", ""},
		{"reused", call{op: "thing.create", body: `{"name":"other"}`, key: "k2"}, "reused", idem.CodeIdempotencyKeyReused},
		{"invalid input, key not consumed", call{op: "thing.create", body: `{"name":""}`, key: "k3"}, "unreserved", idem.CodeInvalidInput},
		{"declared error, stored", call{op: "thing.create", body: `{"name":"fail-x"}`, key: "k4"}, "new", codeThingExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tr.do(t.Context(), tt.call)
			if idem.ErrorCode(res.Err()) != tt.code {
				t.Fatalf("answer %d %s, want code %q", res.Status, res.Body(), tt.code)
			}
			s := tr.callSpan(t, "thing.create")
			wantAttrs(t, s, map[attribute.Key]any{"idem.idempotency.state": tt.state})
			if tt.code != "" {
				wantAttrs(t, s, map[attribute.Key]any{"idem.code": tt.code, "idem.outcome": "failed"})
			}
			if s.Status().Code != codes.Unset {
				t.Errorf("a %d answer's call span is %v; only a 5xx is an error", res.Status, s.Status())
			}
		})
	}
}

// TestTracingRuntimeRetries: each attempt is a span, the failed one an
// error with its code, the retry its sibling.
func TestTracingRuntimeRetries(t *testing.T) {
	var runs atomic.Int64
	m := createMeta()
	m.Idempotent, m.RuntimeRetry = true, idem.RuntimeRetry{MaxAttempts: 2, BackoffMs: 1}
	flaky := idem.Define(m, func(ctx context.Context, call *idem.Call, in createIn) (thing, error) {
		if runs.Add(1) == 1 {
			return thing{}, idem.Retryable(errors.New("the gateway hung up on " + in.Name))
		}
		return thing{ID: "t_" + in.Name, Name: in.Name}, nil
	})
	tr := newTraced(t, []idem.Operation{flaky, showOp()})
	expect(t, tr.do(t.Context(), call{op: "thing.create", body: `{"name":"r"}`, key: "k1"}), http.StatusCreated, "")
	callSpan := tr.callSpan(t, "thing.create")
	wantAttrs(t, callSpan, map[attribute.Key]any{"idem.attempts": 2, "idem.outcome": "succeeded"})
	attempts := tr.spans(callSpan.SpanContext().TraceID())["idem.attempt"]
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	for i, a := range attempts {
		if a.Parent().SpanID() != callSpan.SpanContext().SpanID() {
			t.Errorf("attempt %d is not a child of the call span", i+1)
		}
		wantAttrs(t, a, map[attribute.Key]any{"idem.attempt": i + 1})
	}
	failed, ok := attempts[0], attempts[1]
	if failed.Status().Code != codes.Error || failed.Status().Description != string(idem.CodeExecutionFailed) {
		t.Errorf("the failed attempt's status = %+v", failed.Status())
	}
	wantAttrs(t, failed, map[attribute.Key]any{"idem.code": idem.CodeExecutionFailed, "idem.status": 500})
	if ev := failed.Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("the failed attempt's events = %+v", ev)
	} else {
		wantEvent(t, ev[0], map[attribute.Key]any{"exception.type": idem.CodeExecutionFailed, "idem.retryable": true})
	}
	if ok.Status().Code != codes.Unset || len(ok.Events()) != 0 {
		t.Errorf("the attempt that succeeded: status %+v, events %+v", ok.Status(), ok.Events())
	}
	if n := len(tr.spans(callSpan.SpanContext().TraceID())["idem.store.lease_left"]); n != 1 {
		t.Errorf("%d lease checks before the retry, want 1", n)
	}
}

func wantEvent(t *testing.T, ev sdktrace.Event, want map[attribute.Key]any) {
	t.Helper()
	have := map[attribute.Key]string{}
	for _, kv := range ev.Attributes {
		have[kv.Key] = fmt.Sprint(kv.Value.AsInterface())
	}
	for k, v := range want {
		if have[k] != fmt.Sprint(v) {
			t.Errorf("event %s: %s = %q, want %v", ev.Name, k, have[k], v)
		}
	}
}

// TestTracingHandlerPanic: the attempt's span ends, as an error, and the
// call's too.
func TestTracingHandlerPanic(t *testing.T) {
	seen := make(chan trace.SpanContext, 1)
	tr := newTraced(t, []idem.Operation{tracedCreate(seen), showOp()})
	res := tr.do(t.Context(), call{op: "thing.create", body: `{"name":"panic-1"}`, key: "k1"})
	expect(t, res, http.StatusInternalServerError, idem.CodeExecutionFailed)
	<-seen
	callSpan := tr.callSpan(t, "thing.create")
	if callSpan.Status().Code != codes.Error || callSpan.Status().Description != string(idem.CodeExecutionFailed) {
		t.Errorf("call span status = %+v", callSpan.Status())
	}
	wantAttrs(t, callSpan, map[attribute.Key]any{"idem.status": 500, "idem.outcome": "failed", "idem.idempotency.state": "new"})
	attempts := tr.spans(callSpan.SpanContext().TraceID())["idem.attempt"]
	if len(attempts) != 1 || attempts[0].Status().Code != codes.Error {
		t.Fatalf("attempt spans after a panic: %v", names(attempts))
	}
}

// TestTracingTransactional: the transaction is one store span, the attempt
// inside it.
func TestTracingTransactional(t *testing.T) {
	eachTxStore(t, func(t *testing.T, env txEnv) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
		f := newFixtureOn(t, clock, env.store(t, clock), []idem.Operation{txCreateOp(nil, nil), showOp()},
			func(c *pipeline.Config) { c.TracerProvider = tp })
		tr := &traced{fixture: f, rec: rec}
		expect(t, f.do(t.Context(), txCall("a", "", "k1")), http.StatusCreated, "")
		callSpan := tr.callSpan(t, "thing.create")
		spans := tr.spans(callSpan.SpanContext().TraceID())
		tx, attempt := spans["idem.store.transact"], spans["idem.attempt"]
		if len(tx) != 1 || len(attempt) != 1 {
			t.Fatalf("spans %v", spans)
		}
		if tx[0].Parent().SpanID() != callSpan.SpanContext().SpanID() || attempt[0].Parent().SpanID() != tx[0].SpanContext().SpanID() {
			t.Errorf("the attempt is not inside the transaction's span, inside the call's")
		}
		wantAttrs(t, callSpan, map[attribute.Key]any{"idem.idempotency.state": "new", "idem.attempts": 1})
	})
}

// TestTracingCarriesNoSecrets: no key, input or error message reaches a
// span, whatever the answer.
func TestTracingCarriesNoSecrets(t *testing.T) {
	const key, input = "secret-key-XYZ123", "input-value-QRS789"
	seen := make(chan trace.SpanContext, 8)
	tr := newTraced(t, []idem.Operation{tracedCreate(seen), showOp()})
	for _, c := range []call{
		{op: "thing.create", body: fmt.Sprintf(`{"name":%q}`, input), key: key},
		{op: "thing.create", body: fmt.Sprintf(`{"name":%q}`, input), key: key},               // replay
		{op: "thing.create", body: fmt.Sprintf(`{"name":"other-%s"}`, input), key: key},       // reused: the message quotes the key
		{op: "thing.create", body: fmt.Sprintf(`{"name":"fail-%s"}`, input), key: key + "-2"}, // the message quotes the input
		{op: "thing.create", body: fmt.Sprintf(`{"name":"panic-%s"}`, input), key: key + "-3"},
		{op: "thing.create", body: fmt.Sprintf(`{"name":%q, "extra": 1}`, input), key: key + "-4"}, // invalid input
		{op: "thing.show", path: map[string]string{"id": input}},
	} {
		tr.do(t.Context(), c)
	}
	spans := tr.rec.Ended()
	if len(spans) < 10 {
		t.Fatalf("only %d spans", len(spans))
	}
	for _, s := range spans {
		var texts []string
		texts = append(texts, s.Name(), s.Status().Description)
		for _, kv := range s.Attributes() {
			texts = append(texts, kv.Value.Emit())
		}
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
		}
		for _, text := range texts {
			if strings.Contains(text, key) || strings.Contains(text, input) {
				t.Errorf("span %s carries %q", s.Name(), text)
			}
		}
	}
}

// TestTracingOff: without a TracerProvider nothing is traced, not even
// through the global provider, and a handler's ctx carries no span.
func TestTracingOff(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	global := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(global) })
	seen := make(chan trace.SpanContext, 1)
	f := newFixture(t, []idem.Operation{tracedCreate(seen), showOp()})
	expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}), http.StatusCreated, "")
	if sc := <-seen; sc.IsValid() {
		t.Errorf("with tracing off the handler's ctx carries span %v", sc)
	}
	f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k1"})
	if n := len(rec.Started()); n != 0 {
		t.Fatalf("tracing off started %d spans: %v", n, names(rec.Ended()))
	}
	if f.runner.Tracing() {
		t.Error("Tracing() with no provider")
	}
}

// TestTracingNoopProvider: a provider that records nothing still gives the
// handler a ctx, and a caller's span context passes through.
func TestTracingNoopProvider(t *testing.T) {
	seen := make(chan trace.SpanContext, 1)
	f := newFixture(t, []idem.Operation{tracedCreate(seen), showOp()}, func(c *pipeline.Config) { c.TracerProvider = noop.NewTracerProvider() })
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), parent)
	expect(t, f.do(ctx, call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}), http.StatusCreated, "")
	if sc := <-seen; sc.TraceID() != parent.TraceID() {
		t.Errorf("the handler's span context %v is not in the caller's trace", sc)
	}
	if !f.runner.Tracing() {
		t.Error("Tracing() false with a provider")
	}
}

// TestTracingContinuesTheCallersTrace: a call span is a child of the span
// its ctx carries.
func TestTracingContinuesTheCallersTrace(t *testing.T) {
	seen := make(chan trace.SpanContext, 1)
	tr := newTraced(t, []idem.Operation{tracedCreate(seen), showOp()})
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1}, SpanID: trace.SpanID{0xcd, 2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), parent)
	expect(t, tr.do(ctx, call{op: "thing.create", body: `{"name":"a"}`, key: "k1"}), http.StatusCreated, "")
	s := tr.callSpan(t, "thing.create")
	if s.SpanContext().TraceID() != parent.TraceID() || s.Parent().SpanID() != parent.SpanID() {
		t.Errorf("call span in trace %s under %s, want %s under %s", s.SpanContext().TraceID(), s.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
	if sc := <-seen; sc.TraceID() != parent.TraceID() {
		t.Errorf("the handler's span is in trace %s", sc.TraceID())
	}
}
