package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
)

// The stress tests drive many concurrent calls through the pipeline with
// handlers that are slow, fail (retryably or not), panic, overrun their
// per-attempt timeout or finish after their context ended, while callers
// cancel at random moments. They then check, for every execution, what
// SPEC §1, §5, §7 and §13 guarantee: one finalization, an ordered audit
// trail whose attempt counts match the handler invocations, no runtime
// retry of a write without opt-in, at most one execution per key, one
// definite answer per call that agrees with the attempt record and the
// audit log, and no late result ever reflected in an answer.

// stressAttemptTimeout is the per-attempt timeout of every stress operation.
const stressAttemptTimeout = 30 * time.Millisecond

// stressLate is what a handler returns when it finishes after its context
// ended; it must never appear in an answer.
const stressLate = "LATE-RESULT-MUST-BE-DISCARDED"

// The stress operations.
const (
	stressReadOp   = "stress.read"   // read, runtime retries (maxAttempts 2)
	stressChargeOp = "stress.charge" // write, idempotent: true, maxAttempts 1
	stressCreateOp = "stress.create" // write without opt-in (maxAttempts 0)
)

// stressMaxRuns is the most handler invocations one execution may make.
var stressMaxRuns = map[string]int{stressReadOp: 3, stressChargeOp: 2, stressCreateOp: 1}

type stressReadIn struct {
	ID string `json:"id" in:"path"`
}

type stressWriteIn struct {
	Name string `json:"name" jsonschema:"minLength=1"`
}

type stressOut struct {
	ID    string `json:"id"`
	Value string `json:"value"`
}

// stressInvocation is one handler invocation as the handler saw it.
type stressInvocation struct {
	op, principal, requestKey, handlerKey string
	attempt                               int
}

// stressRecorder is what the handlers record, shared by every runner of a
// test.
type stressRecorder struct {
	active atomic.Int64 // handlers running now

	mu       sync.Mutex
	byExec   map[string][]stressInvocation // execution id → invocations in order
	keyExecs map[string]map[string]bool    // "principal|key" → execution ids
	keyRuns  map[string]int                // "principal|key" → invocations
	problems []string
}

func newStressRecorder() *stressRecorder {
	return &stressRecorder{byExec: map[string][]stressInvocation{}, keyExecs: map[string]map[string]bool{}, keyRuns: map[string]int{}}
}

func (s *stressRecorder) record(ctx context.Context, call *idem.Call) {
	c, ok := idem.CallFromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || c != call {
		s.problems = append(s.problems, fmt.Sprintf("execution %s attempt %d: CallFromContext = %v, %v; want the handler's Call", call.ExecutionID, call.Attempt, c, ok))
	}
	s.byExec[call.ExecutionID] = append(s.byExec[call.ExecutionID], stressInvocation{
		op: call.Operation, principal: call.Principal.ID, requestKey: call.RequestKey, handlerKey: call.IdempotencyKey, attempt: call.Attempt,
	})
	if call.RequestKey != "" {
		k := call.Principal.ID + "|" + call.RequestKey
		if s.keyExecs[k] == nil {
			s.keyExecs[k] = map[string]bool{}
		}
		s.keyExecs[k][call.ExecutionID] = true
		s.keyRuns[k]++
	}
}

func (s *stressRecorder) invocations(id string) []stressInvocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byExec[id])
}

// handle is every stress handler: it records the invocation, then behaves
// at random. Whatever it would return once its context has ended, it
// replaces with the stressLate marker as a success, the most dangerous
// late result there is.
func (s *stressRecorder) handle(ctx context.Context, call *idem.Call, id string, write bool) (stressOut, error) {
	s.active.Add(1)
	defer s.active.Add(-1)
	s.record(ctx, call)
	ok := stressOut{ID: id, Value: "ok " + call.ExecutionID}
	late := stressOut{ID: id, Value: stressLate}
	settle := func(out stressOut, err error) (stressOut, error) {
		if ctx.Err() != nil {
			return late, nil
		}
		return out, err
	}
	work := time.Duration(rand.N(21)) * time.Millisecond
	switch p := rand.N(100); {
	case p < 45: // work that honours the context
		select {
		case <-time.After(work):
			return settle(ok, nil)
		case <-ctx.Done():
			return late, nil
		}
	case p < 55: // work that ignores the context
		time.Sleep(work)
		return settle(ok, nil)
	case p < 67:
		time.Sleep(work)
		return settle(stressOut{}, idem.Retryable(errors.New("downstream hiccup")))
	case p < 75:
		time.Sleep(work)
		return settle(stressOut{}, errors.New("downstream refused"))
	case p < 80:
		if write {
			return settle(stressOut{}, idem.Errorf(codeThingExists, "%s exists", id))
		}
		return settle(ok, nil)
	case p < 82:
		panic("stress handler panics")
	case p < 92: // overruns the attempt's timeout, ignoring the context
		time.Sleep(stressAttemptTimeout + time.Duration(5+rand.N(20))*time.Millisecond)
		return settle(ok, nil)
	default: // hangs until the context ends, then "succeeds"
		<-ctx.Done()
		return late, nil
	}
}

// stressOps declares the three operations over rec.
func stressOps(rec *stressRecorder) []idem.Operation {
	write := func(name, path string, idempotent bool, retry idem.RuntimeRetry) idem.Operation {
		return idem.Define(idem.Metadata{
			Name: name, Method: "POST", Path: path, Summary: "Stress " + name, SideEffect: idem.SideEffectWrite,
			Idempotent: idempotent, RuntimeRetry: retry, Timeout: stressAttemptTimeout, SuccessStatus: http.StatusCreated,
			Retry:  idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: stressReadOp, Rationale: "one effect per key"},
			Errors: []idem.DeclaredError{{Code: codeThingExists, Status: 409, Message: "exists"}},
		}, func(ctx context.Context, call *idem.Call, in stressWriteIn) (stressOut, error) {
			return rec.handle(ctx, call, in.Name, true)
		})
	}
	read := idem.Define(idem.Metadata{
		Name: stressReadOp, Method: "GET", Path: "/v1/stress/items/{id}", Summary: "Stress read", SideEffect: idem.SideEffectRead,
		RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 2, BackoffMs: 3}, Timeout: stressAttemptTimeout,
	}, func(ctx context.Context, call *idem.Call, in stressReadIn) (stressOut, error) {
		return rec.handle(ctx, call, in.ID, false)
	})
	return []idem.Operation{
		read,
		write(stressChargeOp, "/v1/stress/charges", true, idem.RuntimeRetry{MaxAttempts: 1, BackoffMs: 3}),
		write(stressCreateOp, "/v1/stress/things", false, idem.RuntimeRetry{}),
	}
}

type stressKind int

const (
	stressRead    stressKind = iota // a fresh_read, sometimes with an (ignored) key
	stressKeyed                     // a write with a key, from an agent
	stressUnkeyed                   // a write without a key, from a browser
)

func (k stressKind) String() string { return [...]string{"read", "keyed", "unkeyed"}[k] }

// stressCall is one planned call.
type stressCall struct {
	kind      stressKind
	runner    int
	op        string
	principal idem.Principal
	key       string
	path      map[string]string
	body      []byte
	start     time.Duration // after the test's start
	cancelAt  time.Duration // after the call's start; 0 never
}

type stressResult struct {
	resp      idem.Result
	cancelled bool // the caller's cancellation fired before the answer
}

var (
	stressAgents   = []idem.Principal{{Org: "acme", ID: "stress-agent-1", Kind: idem.KindAgent}, {Org: "acme", ID: "stress-agent-2", Kind: idem.KindAgent}}
	stressBrowsers = []idem.Principal{{Org: "acme", ID: "stress-browser-1", Kind: idem.KindBrowser}, {Org: "acme", ID: "stress-browser-2", Kind: idem.KindBrowser}}
	stressEveryone = slices.Concat(stressAgents, stressBrowsers)
)

// stressPlan plans n calls over runners, started within spread. Keyed calls
// come in groups of one to four callers sending the same key at nearly the
// same moment, each to a random runner; one member in twenty sends another
// body under the group's key. One call in five is cancelled by its caller
// 1–60 ms after it starts.
func stressPlan(rng *rand.Rand, n, runners int, spread time.Duration) []stressCall {
	var calls []stressCall
	pick := func(ps []idem.Principal) idem.Principal { return ps[rng.IntN(len(ps))] }
	cancelAt := func() time.Duration {
		if rng.IntN(100) < 20 {
			return time.Duration(1+rng.IntN(60)) * time.Millisecond
		}
		return 0
	}
	writeOp := func() string {
		if rng.IntN(2) == 0 {
			return stressChargeOp
		}
		return stressCreateOp
	}
	for g := 0; len(calls) < n; g++ {
		start := time.Duration(rng.Int64N(int64(spread)))
		switch p := rng.IntN(100); {
		case p < 30:
			c := stressCall{kind: stressRead, op: stressReadOp, principal: pick(stressEveryone),
				path: map[string]string{"id": fmt.Sprintf("item-%d", rng.IntN(50))}}
			if rng.IntN(5) == 0 {
				c.key = fmt.Sprintf("read-key-%d", g) // ignored on fresh_read
			}
			calls = append(calls, c)
		case p < 75:
			op, principal, key := writeOp(), pick(stressAgents), fmt.Sprintf("key-%d", g)
			body := fmt.Sprintf(`{"name":"thing-%d"}`, g)
			members := 1 + rng.IntN(4)
			for m := 0; m < members && len(calls) < n; m++ {
				c := stressCall{kind: stressKeyed, op: op, principal: principal, key: key, body: []byte(body)}
				if m > 0 && rng.IntN(20) == 0 {
					c.body = fmt.Appendf(nil, `{"name":"other-%d"}`, g)
				}
				c.start = start + time.Duration(rng.IntN(3))*time.Millisecond
				c.runner, c.cancelAt = rng.IntN(runners), cancelAt()
				calls = append(calls, c)
			}
			continue
		default:
			// Few distinct bodies, so that executions chain by reinvocationOf
			// and an execution no answer saw shows up as a link.
			calls = append(calls, stressCall{kind: stressUnkeyed, op: writeOp(), principal: pick(stressBrowsers),
				body: fmt.Appendf(nil, `{"name":"thing-%d"}`, rng.IntN(8))})
		}
		last := &calls[len(calls)-1]
		last.start, last.runner, last.cancelAt = start, rng.IntN(runners), cancelAt()
	}
	return calls
}

// stressRun makes every planned call concurrently and returns the answers.
func stressRun(runners []*pipeline.Runner, calls []stressCall) []stressResult {
	results := make([]stressResult, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			time.Sleep(c.start)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var fired atomic.Bool
			if c.cancelAt > 0 {
				t := time.AfterFunc(c.cancelAt, func() { fired.Store(true); cancel() })
				defer t.Stop()
			}
			req := idem.Invocation{Operation: c.op, Principal: c.principal, Intent: idem.Intent{PathParams: c.path, Body: c.body}}
			if c.key != "" {
				req.Key = c.key
			}
			resp := runners[c.runner].Call(ctx, req)
			results[i] = stressResult{resp: resp, cancelled: fired.Load()}
		})
	}
	wg.Wait()
	return results
}

// stressReport collects violations; it prints the first few of each kind.
type stressReport struct {
	t      *testing.T
	counts map[string]int
}

func (r *stressReport) fail(kind, format string, args ...any) {
	r.t.Helper()
	r.counts[kind]++
	if r.counts[kind] <= 5 {
		r.t.Errorf("%s: %s", kind, fmt.Sprintf(format, args...))
	}
}

func (r *stressReport) finish() {
	r.t.Helper()
	kinds := make([]string, 0, len(r.counts))
	for k := range r.counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		r.t.Errorf("violations of %q: %d", k, r.counts[k])
	}
}

// stressAllowed lists the answers each kind of call may get, besides
// replays (keyed only): "status code".
var stressAllowed = map[stressKind][]string{
	stressRead:    {"200 ", "500 EXECUTION_FAILED", "504 TIMEOUT", "499 CANCELLED"},
	stressUnkeyed: {"201 ", "409 THING_EXISTS", "500 EXECUTION_FAILED", "504 TIMEOUT", "499 CANCELLED"},
	stressKeyed: {"201 ", "409 THING_EXISTS", "500 EXECUTION_FAILED", "504 TIMEOUT", "499 CANCELLED",
		"409 IDEMPOTENCY_KEY_IN_FLIGHT", "409 IDEMPOTENCY_RESULT_INDETERMINATE", "422 IDEMPOTENCY_KEY_REUSED"},
}

// stressCheck checks every answer, execution and key.
func stressCheck(t *testing.T, runner *pipeline.Runner, rec *stressRecorder, calls []stressCall, results []stressResult) {
	t.Helper()
	ctx := t.Context()
	rep := &stressReport{t: t, counts: map[string]int{}}
	defer rep.finish()
	for _, p := range rec.problems {
		rep.fail("handler context", "%s", p)
	}

	// Answers.
	bodies := make([]decoded, len(results))
	original := map[string]int{} // execution id → index of its live (not replayed) answer
	outcomes := map[string]int{}
	for i, res := range results {
		c, resp := calls[i], res.resp
		var d decoded
		if err := json.Unmarshal(resp.Body(), &d); err != nil {
			rep.fail("definite answer", "call %d (%s %s): status %d, body %q: %v", i, c.kind, c.op, resp.Status, resp.Body(), err)
			continue
		}
		bodies[i] = d
		answer := fmt.Sprintf("%d %s", resp.Status, d.Code)
		label := fmt.Sprintf("%s %s %s", c.kind, c.op, answer)
		if resp.Replayed {
			label += " (replay)"
		}
		outcomes[label]++
		if strings.Contains(string(resp.Body()), stressLate) {
			rep.fail("late result reflected", "call %d (%s %s): %s", i, c.kind, c.op, resp.Body())
		}
		if resp.Status >= 400 {
			if resp.Problem == nil || resp.Problem.Status != resp.Status || resp.Problem.Code != d.Code || d.Code.Info().Status != resp.Status {
				rep.fail("definite answer", "call %d: status %d with problem %+v", i, resp.Status, resp.Problem)
			}
		} else if d.Code != "" || len(d.Data) == 0 {
			rep.fail("definite answer", "call %d: status %d with body %s", i, resp.Status, resp.Body())
		}
		if resp.Replayed != (d.Meta.Idempotency != nil && d.Meta.Idempotency.Replayed) {
			rep.fail("definite answer", "call %d: Replayed %v but meta %+v", i, resp.Replayed, d.Meta)
		}
		if !slices.Contains(stressAllowed[c.kind], answer) && !(resp.Replayed && c.kind == stressKeyed) {
			rep.fail("unexpected answer", "call %d (%s %s, cancel fired %v): %s", i, c.kind, c.op, res.cancelled, resp.Body())
		}
		if d.Code == idem.CodeCancelled && !res.cancelled {
			rep.fail("unexpected answer", "call %d: CANCELLED though its caller never cancelled", i)
		}
		switch {
		case c.kind == stressKeyed:
			if d.Meta.Idempotency == nil || d.Meta.Idempotency.Key != c.key || d.Meta.Idempotency.Replayed != resp.Replayed {
				rep.fail("definite answer", "keyed call %d: meta.idempotency = %+v, replayed %v", i, d.Meta.Idempotency, resp.Replayed)
			}
			if resp.Status >= 500 && (d.Retryable || d.Details["reconcile"] != stressReadOp) {
				rep.fail("definite answer", "keyed call %d: a 5xx must be retryable false with details.reconcile: %s", i, resp.Body())
			}
		case resp.Replayed || d.Meta.Idempotency != nil:
			rep.fail("definite answer", "unkeyed call %d: replayed %v, meta.idempotency %+v", i, resp.Replayed, d.Meta.Idempotency)
		}
		if id := d.Meta.ExecutionID; id != "" && !resp.Replayed {
			if prev, dup := original[id]; dup {
				rep.fail("finalized once", "execution %s answered live twice (calls %d and %d)", id, prev, i)
			}
			original[id] = i
		}
	}
	labels := make([]string, 0, len(outcomes))
	for l := range outcomes {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	var sb strings.Builder
	for _, l := range labels {
		fmt.Fprintf(&sb, "\n  %5d  %s", outcomes[l], l)
	}
	t.Logf("answers:%s", sb.String())

	// Let the handlers whose results were discarded finish: each ends
	// within its overrun (< 60 ms) of its context ending. Bounded.
	settled := func() bool {
		if rec.active.Load() != 0 {
			return false
		}
		for id, i := range original {
			if len(rec.invocations(id)) < bodies[i].Meta.Attempts {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(5 * time.Second); !settled() && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}

	// Executions: every id an answer or a handler saw.
	known := map[string]bool{}
	for id := range original {
		known[id] = true
	}
	for i := range results {
		if id := bodies[i].Meta.ExecutionID; id != "" {
			known[id] = true
		}
	}
	rec.mu.Lock()
	for id := range rec.byExec {
		known[id] = true
	}
	rec.mu.Unlock()
	handlerKeys := map[string]string{}
	executions := map[string]idem.Execution{}
	for id := range known {
		x, err := runner.GetExecution(ctx, approver, id)
		if err != nil {
			rep.fail("finalized once", "execution %s: %v", id, err)
			continue
		}
		executions[id] = x
		invs := rec.invocations(id)
		stressCheckEvents(rep, x, invs)
		if most := stressMaxRuns[x.Operation]; len(invs) > most {
			rep.fail("runtime retries", "execution %s of %s: the handler ran %d times, at most %d allowed", id, x.Operation, len(invs), most)
		}
		for j, inv := range invs {
			if inv.op != x.Operation || inv.principal != x.Principal || inv.requestKey != x.Key {
				rep.fail("handler context", "execution %s: invocation %+v does not match the execution %s/%s/%s", id, inv, x.Operation, x.Principal, x.Key)
			}
			if inv.handlerKey != invs[0].handlerKey {
				rep.fail("handler key", "execution %s: attempt %d saw key %s, attempt 1 saw %s", id, j+1, inv.handlerKey, invs[0].handlerKey)
			}
		}
		if len(invs) > 0 {
			if other, dup := handlerKeys[invs[0].handlerKey]; dup {
				rep.fail("handler key", "executions %s and %s share the handler key %s", id, other, invs[0].handlerKey)
			}
			handlerKeys[invs[0].handlerKey] = id
		}
		if x.ReinvocationOf != nil && !known[*x.ReinvocationOf] {
			rep.fail("orphan execution", "execution %s is a re-invocation of %s, which no answer and no handler saw", id, *x.ReinvocationOf)
		}
	}

	// Each live answer agrees with its execution's audit trail.
	for id, i := range original {
		x, ok := executions[id]
		if !ok {
			continue
		}
		resp, d := results[i].resp, bodies[i]
		final := stressFinal(x)
		if final == nil {
			continue // reported by stressCheckEvents
		}
		if d.Meta.Attempts != final.Attempts {
			rep.fail("definite answer", "execution %s: answer says %d attempts, the audit log %d", id, d.Meta.Attempts, final.Attempts)
		}
		succeeded := resp.Status < 400
		if succeeded != (final.Type == idem.EventSucceeded) || (!succeeded && final.Code != d.Code) {
			rep.fail("definite answer", "execution %s: answered %d %s, audit log says %s %s", id, resp.Status, d.Code, final.Type, final.Code)
		}
	}

	// Keys: at most one execution each, and the record agrees with the answers.
	type keyRef struct {
		principal idem.Principal
		key, op   string
	}
	keys := map[string]keyRef{}
	for _, c := range calls {
		if c.kind == stressKeyed {
			keys[c.principal.ID+"|"+c.key] = keyRef{c.principal, c.key, c.op}
		}
	}
	rec.mu.Lock()
	keyExecs, keyRuns := map[string]map[string]bool{}, map[string]int{}
	for k, v := range rec.keyExecs {
		keyExecs[k], keyRuns[k] = v, rec.keyRuns[k]
	}
	rec.mu.Unlock()
	for k := range keyExecs {
		if _, ok := keys[k]; !ok {
			rep.fail("handler key", "a handler saw request key %s, which no keyed call sent", k)
		}
	}
	for k, ref := range keys {
		if len(keyExecs[k]) > 1 {
			rep.fail("once per key", "key %s ran in %d executions: %v", k, len(keyExecs[k]), keyExecs[k])
		}
		if keyRuns[k] > stressMaxRuns[ref.op] {
			rep.fail("once per key", "key %s (%s): the handler ran %d times", k, ref.op, keyRuns[k])
		}
		a, err := runner.GetAttempt(ctx, ref.principal, ref.key)
		if idem.ErrorCode(err) == idem.CodeNotFound {
			if len(keyExecs[k]) > 0 {
				rep.fail("once per key", "key %s: the handler ran but no attempt record exists", k)
			}
			continue
		}
		if err != nil {
			rep.fail("once per key", "key %s: %v", k, err)
			continue
		}
		if a.State == idem.AttemptInFlight || !known[a.ExecutionID] {
			var answers []string
			for i, c := range calls {
				if c.kind == stressKeyed && c.principal.ID+"|"+c.key == k {
					answers = append(answers, fmt.Sprintf("call %d (cancel at %s, fired %v): %s", i, c.cancelAt, results[i].cancelled, results[i].resp.Body()))
				}
			}
			rep.fail("orphan execution", "key %s: record %s for execution %s, which no answer and no handler saw; the answers to this key:\n  %s",
				k, a.State, a.ExecutionID, strings.Join(answers, "\n  "))
		}
		if len(keyExecs[k]) == 1 && !keyExecs[k][a.ExecutionID] {
			rep.fail("once per key", "key %s: the record names %s, the handler ran for %v", k, a.ExecutionID, keyExecs[k])
		}
	}
	for i, res := range results {
		c, d := calls[i], bodies[i]
		if c.kind != stressKeyed || d.Meta.ExecutionID == "" {
			continue
		}
		a, err := runner.GetAttempt(ctx, c.principal, c.key)
		if err != nil {
			rep.fail("definite answer", "keyed call %d answered with execution %s, but its record: %v", i, d.Meta.ExecutionID, err)
			continue
		}
		wantState := idem.AttemptCompleted
		if res.resp.Status >= 500 || res.resp.Status == idem.StatusClientClosedRequest {
			wantState = idem.AttemptIndeterminate
		}
		if a.ExecutionID != d.Meta.ExecutionID || a.State != wantState || (a.Status != nil && *a.Status != res.resp.Status) {
			rep.fail("definite answer", "keyed call %d answered %d for execution %s (replayed %v); record: %s %v for %s",
				i, res.resp.Status, d.Meta.ExecutionID, res.resp.Replayed, a.State, a.Status, a.ExecutionID)
		}
		if j, ok := original[d.Meta.ExecutionID]; ok && res.resp.Replayed {
			o := bodies[j]
			if results[j].resp.Status != res.resp.Status || o.Code != d.Code || (d.Code == "" && !jsonEqual(o.Data, d.Data)) {
				rep.fail("definite answer", "keyed call %d: replay %s differs from the original %s", i, res.resp.Body(), results[j].resp.Body())
			}
		}
	}
	attempts := map[string]int{}
	for _, x := range executions {
		attempts[fmt.Sprintf("%s %d", x.Operation, x.Attempts)]++
	}
	t.Logf("%d calls, %d executions, %d keys; executions by operation and attempts: %v", len(calls), len(executions), len(keys), attempts)
}

// stressFinal returns the final event of x, or nil.
func stressFinal(x idem.Execution) *idem.AuditEvent {
	for i := len(x.Events) - 1; i >= 0; i-- {
		if t := x.Events[i].Type; t == idem.EventSucceeded || t == idem.EventFailed {
			return &x.Events[i]
		}
	}
	return nil
}

// stressCheckEvents checks an execution's audit trail against its handler
// invocations: execution.started{attempt 1} first, execution.retried
// {attempt 2..n} in order, exactly one final event, last but for replays,
// with attempts == n == the invocations, attempts 1..n each once.
func stressCheckEvents(rep *stressReport, x idem.Execution, invs []stressInvocation) {
	rep.t.Helper()
	var types []string
	for _, e := range x.Events {
		s := e.Type
		switch e.Type {
		case idem.EventStarted, idem.EventRetried:
			s += fmt.Sprintf("{attempt %d}", e.Attempt)
		case idem.EventSucceeded, idem.EventFailed:
			s += fmt.Sprintf("{attempts %d %s}", e.Attempts, e.Code)
		}
		types = append(types, s)
	}
	trail := fmt.Sprintf("execution %s (%s, key %q, %d invocations): %s", x.ID, x.Operation, x.Key, len(invs), strings.Join(types, ", "))
	if len(x.Events) == 0 || x.Events[0].Type != idem.EventStarted || x.Events[0].Attempt != 1 {
		rep.fail("event order", "does not start with execution.started{attempt 1}: %s", trail)
		return
	}
	finals, finalAt, retried := 0, -1, 0
	for i, e := range x.Events[1:] {
		switch e.Type {
		case idem.EventStarted:
			rep.fail("event order", "started twice: %s", trail)
		case idem.EventRetried:
			retried++
			if finals > 0 {
				rep.fail("event order", "retried after the final event: %s", trail)
			}
			if e.Attempt != retried+1 {
				rep.fail("event order", "retried event %d carries attempt %d: %s", retried, e.Attempt, trail)
			}
		case idem.EventSucceeded, idem.EventFailed:
			finals++
			finalAt = i + 1
		case idem.EventReplayed:
			if finals == 0 {
				rep.fail("event order", "replayed before the final event: %s", trail)
			}
		default:
			rep.fail("event order", "unexpected event %s: %s", e.Type, trail)
		}
	}
	if finals != 1 {
		rep.fail("finalized once", "%d final events: %s", finals, trail)
		return
	}
	final := x.Events[finalAt]
	// A caller that cancelled while the reservation was being written gets
	// CANCELLED with no attempt, and a lease that passed before attempt 1
	// could start (a loaded machine: the stress timeouts are short) a
	// TIMEOUT with none: the handler never starts.
	neverRan := final.Attempts == 0 && retried == 0 && (final.Code == idem.CodeCancelled || final.Code == idem.CodeTimeout)
	if final.Attempts != retried+1 && !neverRan {
		rep.fail("event order", "final attempts %d after %d retried events: %s", final.Attempts, retried, trail)
	}
	if final.Attempts != len(invs) {
		rep.fail("attempts = invocations", "final attempts %d, handler invoked %d times: %s", final.Attempts, len(invs), trail)
	}
	if x.Attempts != final.Attempts || (x.Outcome == idem.OutcomeSucceeded) != (final.Type == idem.EventSucceeded) || x.Outcome == idem.OutcomeRunning {
		rep.fail("finalized once", "execution row says %d attempts, %s: %s", x.Attempts, x.Outcome, trail)
	}
	seen := map[int]bool{}
	for _, inv := range invs {
		if inv.attempt < 1 || inv.attempt > len(invs) || seen[inv.attempt] {
			rep.fail("attempts = invocations", "handler attempts %v: %s", invs, trail)
			break
		}
		seen[inv.attempt] = true
	}
}

func TestStressThousandExecutions(t *testing.T) {
	rec := newStressRecorder()
	f := newFixture(t, stressOps(rec), unbounded)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	calls := stressPlan(rand.New(rand.NewPCG(seed, seed)), 1000, 1, 2*time.Second)
	began := time.Now()
	results := stressRun([]*pipeline.Runner{f.runner}, calls)
	ran := time.Since(began)
	stressCheck(t, f.runner, rec, calls, results)
	t.Logf("wall time: %s for the calls, %s with the checks", ran.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

func TestStressPostgresTwoRunners(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	stores := newPGStores(t, clock, 2)
	rec := newStressRecorder()
	ops := stressOps(rec)
	runners := []*pipeline.Runner{newFixtureOn(t, clock, stores[0], ops, unbounded).runner, newFixtureOn(t, clock, stores[1], ops, unbounded).runner}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	calls := stressPlan(rand.New(rand.NewPCG(seed, seed)), 200, len(runners), time.Second)
	began := time.Now()
	results := stressRun(runners, calls)
	ran := time.Since(began)
	stressCheck(t, runners[0], rec, calls, results)
	t.Logf("wall time: %s for the calls, %s with the checks", ran.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// TestStressCancelBetweenAttempts pins down the scenario the stress runs
// meet at random: the caller cancels after an attempt failed retryably,
// while the runtime waits to retry. RetryOn cancels the caller's context,
// so the cancellation lands exactly between the decision to retry and the
// backoff wait. No second attempt runs, so the audit trail must not claim
// one: execution.started{1} then execution.failed{attempts 1, CANCELLED},
// with no execution.retried{attempt 2} (runAttempts appends that event only
// once the backoff wait is over).
func TestStressCancelBetweenAttempts(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rec := newStressRecorder()
	flaky := idem.Define(idem.Metadata{
		Name: "stress.flaky", Method: "GET", Path: "/v1/stress/flaky", Summary: "Fails retryably", SideEffect: idem.SideEffectRead,
		RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 2, BackoffMs: 1000, RetryOn: func(error) bool { cancel(); return true }},
	}, func(ctx context.Context, call *idem.Call, in struct{}) (stressOut, error) {
		rec.record(ctx, call)
		return stressOut{}, idem.Retryable(errors.New("downstream hiccup"))
	})
	f := newFixture(t, []idem.Operation{flaky})
	d := expect(t, f.runner.Call(ctx, idem.Invocation{Operation: "stress.flaky", Principal: agent}), idem.StatusClientClosedRequest, idem.CodeCancelled)
	x, err := f.runner.GetExecution(t.Context(), approver, d.Meta.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	rep := &stressReport{t: t, counts: map[string]int{}}
	stressCheckEvents(rep, x, rec.invocations(x.ID))
	rep.finish()
	if d.Meta.Attempts != 1 {
		t.Errorf("meta.attempts = %d, want 1 (one handler invocation)", d.Meta.Attempts)
	}
}

// unbounded lifts admission control: the stress tests run a thousand
// executions at once to test the pipeline, not its admission.
func unbounded(c *pipeline.Config) { c.MaxExecutions, c.DecodeBudget = -1, -1 }
