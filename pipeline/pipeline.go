package pipeline

// The entry of a call and stages 2 to 9 in order (doc.go names the file
// of each stage). Admission control (admission.go) wraps stages 4 and 8.

import (
	"github.com/idem-run/idem"

	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem/canonical"
)

// newID returns prefix + a time-ordered, random, URL-safe id (ULID-like:
// 48 bits of milliseconds, 80 random bits, base32).
func newID(prefix string, now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	var out [32]byte // "apr_" and 26 characters
	return string(idEncoding.AppendEncode(append(out[:0], prefix...), b[:]))
}

// idEncoding is base32 (RFC 4648) in lower case, without padding.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Call runs one call through the pipeline and returns its one final
// answer, typed (Result). It never returns an error: a failure is a Result
// with a Problem.
func (r *Runner) Call(ctx context.Context, inv idem.Invocation) idem.Result {
	start := r.cfg.Clock.Now()
	x := &execution{r: r, inv: inv, start: start}
	var span trace.Span // nil when tracing is off
	if r.tracer != nil {
		ctx, span = x.startCall(ctx)
	}
	x.explicit = ctx
	switch {
	case inv.Connection == nil:
	case ctx.Done() == nil:
		// Nothing but the connection cancels the call (HTTP): ctx's
		// values, the connection's end.
		ctx = connected{ctx, inv.Connection}
	default:
		// The connection's end cancels the call too, until a keyed call
		// detaches from it (execute, transact).
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(inv.Connection, cancel)()
	}
	resp := x.run(ctx)
	took := r.cfg.Clock.Now().Sub(start)
	if r.logs(resp) {
		x.log(resp, took)
	}
	if r.cfg.Observe != nil {
		rep := Report{Operation: x.inv.Operation, Status: resp.Status, Keyed: x.key != "", Replayed: resp.Replayed, DryRun: x.op != nil && x.inv.DryRun, Duration: took, Limit: x.limited}
		if !resp.Replayed {
			rep.Attempts = x.attempts
		}
		if resp.Problem != nil {
			rep.Code = resp.Problem.Code
		}
		r.cfg.Observe(rep)
	}
	if span != nil {
		x.endCall(span, resp)
	}
	return resp
}

// execution is the state of one pass through the pipeline.
type execution struct {
	r   *Runner
	inv idem.Invocation
	// explicit is the call's context without its connection: what a keyed
	// call runs under once reserved (SPEC §7).
	explicit context.Context
	op       *operation
	start    time.Time
	key      string // the valid idempotency key, "" when unkeyed
	opaque   string // a raw operation's body media type when not JSON (opaqueBody)
	// canon is the JSON body in its strict canonical form, read once for
	// the fingerprint and stage 4 (canonErr when it is not acceptable).
	canon       []byte
	canonErr    error
	fingerprint string
	// fingerprintV1 is the intent's fingerprint under preimage version 1
	// (sameIntent), once computed.
	fingerprintV1 string
	executionID   string
	attempts      int
	// approvalID is the approval the execution consumed; empty when none.
	approvalID string
	// handlerErr is the error the last attempt's handler returned (a
	// *handlerPanic if it panicked); nil when it succeeded, did not run,
	// or its result was discarded (timeout, cancellation).
	handlerErr error
	// leaseDeadline bounds the reservation's lease by the monotonic clock
	// (zero when unkeyed); runAttempts tightens it from the store.
	leaseDeadline time.Time
	policyLog     []string
	// approval is stage 6's decision when the call needs approval.
	approval *idem.PolicyDecision
	// rules are the configured rules the call evaluated (nil: none);
	// limited names the configured limit that refused it.
	rules *rulesHolder
	// rulesLoaded: rules holds the call's set (loadRules).
	rulesLoaded bool
	limited     string
	// uncommitted: the key is held by a transactional execution whose
	// record is not committed yet, so a wait must not give up when it
	// finds no record.
	uncommitted bool
	// keyOutsideContract is the key of a call refused because its
	// operation's contract takes none; recordOnly, that refusal when the
	// key has a record of the operation all the same (keptRecord): the
	// call may be answered from it, and from nothing else.
	keyOutsideContract string
	recordOnly         *idem.Error
	// kept is the rendered replay the replay cache held with the record
	// of execution keptOf, last read from it (replay).
	kept   *idem.Result
	keptOf string
	// unstarted: a fresh read whose execution the store has not started;
	// its finish records it whole, through the audit queue (readAudit).
	unstarted *idem.StartParams
}

func (x *execution) meta() *idem.Meta {
	m := &idem.Meta{ExecutionID: x.executionID, Attempts: x.attempts}
	if x.op != nil {
		m.Operation = x.op.meta.Name
	}
	if x.key != "" {
		m.Idempotency = &idem.IdempotencyMeta{Key: x.key}
	}
	return m
}

// fail answers with e and the meta known so far.
func (x *execution) fail(e *idem.Error) idem.Result {
	return idem.ProblemResult(idem.NewProblem(e, x.meta()))
}

func (x *execution) run(ctx context.Context) idem.Result {
	r, inv := x.r, x.inv
	// Stage 2: resolve.
	op, ok := r.decl.Load().ops[inv.Operation]
	if !ok || !exposedOn(op.meta, inv.Surface) {
		return x.fail(idem.Errorf(idem.CodeOperationNotFound, "no operation named %q on this surface", inv.Operation))
	}
	x.op = op
	// Stage 3: the contract checks, in the order of SPEC §6.4.
	if err := x.checkContract(); err != nil && !x.keptRecord(ctx, err) {
		return x.fail(err)
	}
	// Stages 4 and 5 from memory hold a share of the decode budget.
	releaseInput, aerr := x.admitInput(ctx)
	if aerr != nil {
		return x.fail(aerr)
	}
	defer releaseInput()
	x.opaque = x.opaqueBody()
	x.emptyObjectIsNoBody()
	if body := x.inv.Intent.Body; len(body) > 0 && x.opaque == "" {
		x.canon, x.canonErr = canonical.TransformStrict(body)
		if releaseInput, aerr = x.admitDense(ctx, releaseInput); aerr != nil {
			return x.fail(aerr)
		}
		defer releaseInput()
	}
	fp, ferr := x.fingerprintOf()
	var cached idem.Attempt // the key's completed record in memory, read once
	hit := false
	if x.key != "" && ferr == nil {
		// Stage 5 from memory first: a completed record of this exact
		// request passed stage 4 when it ran, so its replay needs no
		// decoding.
		cached, hit = x.fromCache(x.key)
		if hit && (x.recordOnly == nil || cached.Operation == op.meta.Name) {
			if x.fingerprint = fp; x.sameIntent(cached) {
				return x.answerExisting(ctx, cached)
			}
		}
		// A key whose final record left the cache (ghosts) is most likely
		// a replay: reading it is cheaper than leaving stage 5 to the
		// reservation, and a final record of this exact request needs no
		// decoding either.
		if !hit && r.cache.known(inv.Principal.Scope(), x.key) && x.stage5Folded() {
			if a, err := x.readRecord(ctx, x.key); err == nil && a.State != idem.AttemptInFlight {
				if x.fingerprint = fp; x.sameIntent(a) {
					return x.answerExisting(ctx, a)
				}
			}
		}
	}
	// Stage 4: input.
	raw, in, err := x.decodeInput()
	releaseInput()
	if x.recordOnly != nil && (err != nil || ferr != nil) {
		return x.refuseRecordOnly()
	}
	if err != nil {
		return x.fail(err)
	}
	if ferr != nil {
		return x.fail(idem.Errorf(idem.CodeInvalidInput, "the body is not canonical JSON: %v", ferr).WithDetail("errors", []map[string]string{{"path": "", "message": ferr.Error()}}))
	}
	x.fingerprint = fp
	// Stage 5: an existing attempt answers before any policy or approval.
	// Without a gate between it and the reservation, the reservation
	// reads the key itself (stage5Folded): one store call fewer.
	folded := x.key != "" && x.stage5Folded()
	if folded {
		if hit {
			return x.answerExisting(ctx, cached)
		}
	} else if x.key != "" {
		a, err := x.readRecord(ctx, x.key)
		switch {
		case x.recordOnly != nil && (err != nil || !x.sameIntent(a) || a.Operation != op.meta.Name):
			return x.refuseRecordOnly()
		case err == nil:
			return x.answerExisting(ctx, a)
		case !errors.Is(err, idem.ErrNotFound):
			return x.fail(storeFailure(ctx, err))
		}
	}
	// Stage 6: policies.
	approval, perr := x.evaluatePolicies(ctx, in, raw)
	x.approval = approval
	if perr != nil {
		return x.fail(perr)
	}
	// Admission of the execution, before anything is stored.
	releaseExecution, aerr := x.admitExecution(ctx)
	if aerr != nil {
		if folded {
			// A refusal must not hide the key's record: stage 5 runs now.
			if a, err := x.readRecord(ctx, x.key); err == nil {
				return x.answerExisting(ctx, a)
			}
		}
		return x.fail(aerr)
	}
	defer releaseExecution()
	if inv.DryRun {
		return x.preview(ctx, in)
	}
	// Configured rate limits, before the approval gate and the key's
	// reservation: a refused call stored nothing, and its same-key retry
	// runs normally.
	if lerr := x.limit(); lerr != nil {
		return x.fail(lerr)
	}
	// Stage 7: approval gate.
	approvalID, reason := "", ""
	if approval != nil {
		reason = approval.Reason
		id, existing, err := x.approvalGate(ctx, raw, approval)
		switch {
		case existing != nil:
			return x.answerExisting(ctx, *existing)
		case err != nil:
			return x.fail(err)
		}
		approvalID = id
	}
	// Stages 8 and 9: reservation (or an unkeyed start), with the approval
	// consumed in the same transaction and execution.started written.
	// The execution exists, and the answer names it, once the store has
	// started it.
	start := idem.StartParams{ExecutionID: newID("exe_", r.cfg.Clock.Now()), Scope: inv.Principal.Scope(), Operation: op.meta.Name,
		Fingerprint: fp, FingerprintVersion: canonical.FingerprintVersion, ApprovalID: approvalID}
	if op.meta.Retry.Transactional {
		return x.transact(ctx, in, start, raw, reason, releaseExecution)
	}
	// The write runs detached from the caller's cancellation, so that its
	// outcome is known: a commit cut off by a cancellation could otherwise
	// leave a reservation nobody finishes. A cancellation that arrived
	// meanwhile is honoured before the handler starts (execute).
	sctx, cancel := detached(ctx, finalizeTimeout)
	defer cancel()
	var fence int64
	if x.key != "" {
		// The store starts the lease after t0, so t0 + lease is a
		// deadline the lease cannot outlast, by the monotonic clock.
		lease := op.meta.Lease(r.cfg.LeaseGrace)
		t0 := time.Now()
		res, err := r.cfg.Store.Reserve(sctx, idem.ReserveParams{StartParams: start, Key: x.key, Lease: lease, Retention: r.cfg.Retention})
		if err != nil {
			return x.startFailure(ctx, err, raw, reason)
		}
		if !res.Reserved {
			return x.notReserved(ctx, res.Attempt, releaseExecution)
		}
		fence = res.Attempt.FencingToken
		x.leaseDeadline = t0.Add(lease)
		r.done.started(inv.Principal.Scope(), x.key)
	} else if op.meta.Retry.Kind == idem.RetryFreshRead && approvalID == "" {
		// A fresh read commits nothing on the request path: its execution
		// is recorded whole, started and finished, by the audit queue once
		// it is answered (finalize).
		x.unstarted = &start
	} else {
		if _, err := r.cfg.Store.StartExecution(sctx, start); err != nil {
			return x.startFailure(ctx, err, raw, reason)
		}
	}
	x.executionID, x.approvalID = start.ExecutionID, approvalID
	// Stages 10 to 13.
	return x.execute(ctx, in, fence)
}

// stage5Folded reports whether stage 5's read of the key can be left to
// the reservation (Reserve, Transact), which returns the key's record
// when it has one, answered then as stage 5 would (notReserved): when
// nothing between the two stages can answer first, so that SPEC §5's
// order cannot be observed. That is an operation with no policy (none
// configured, none its own) that does not always require an approval,
// called for real (a dry run answers before any reservation) with a key
// its contract takes (recordOnly calls only read), with no configured rules
// (their policies and rate limits answer before the reservation too). A refusal by admission
// reads the key after all (run). A new gate before the reservation must
// be added here.
func (x *execution) stage5Folded() bool {
	return x.recordOnly == nil && !x.inv.DryRun && x.op.meta.Approval != idem.ApprovalAlways &&
		len(x.r.cfg.Policies) == 0 && len(x.op.Policies()) == 0 && x.loadRules() == nil
}

// connected is a context with the values of its Context and the
// cancellation of conn: a call's context when only its connection can
// cancel it. It is an afterFuncer, so that the contexts derived from it
// follow conn without a goroutine of their own.
type connected struct {
	context.Context
	conn context.Context
}

func (c connected) Deadline() (time.Time, bool)           { return c.conn.Deadline() }
func (c connected) Done() <-chan struct{}                 { return c.conn.Done() }
func (c connected) Err() error                            { return c.conn.Err() }
func (c connected) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(c.conn, f) }

// detached is ctx without its cancellation, bounded by d: for the store
// writes whose outcome must be known even when the caller has gone.
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// notReserved answers a call whose reservation found the key's record,
// created since stage 5, as stage 5 would. Answering it (or waiting on
// it) is no execution: the call's admission place is given back first.
func (x *execution) notReserved(ctx context.Context, a idem.Attempt, releaseExecution func()) idem.Result {
	releaseExecution()
	if a.State != idem.AttemptInFlight {
		x.r.cache.missed()
	}
	x.r.cache.put(a, x.r.cfg.Clock.Now())
	return x.answerExisting(ctx, a)
}

// readRecord reads the call's record of key, from the replay cache when it
// holds it.
func (x *execution) readRecord(ctx context.Context, key string) (idem.Attempt, error) {
	if a, ok := x.fromCache(key); ok {
		return a, nil
	}
	r, now := x.r, x.r.cfg.Clock.Now()
	a, err := r.cfg.Store.GetAttempt(ctx, idem.GetAttemptParams{Scope: x.inv.Principal.Scope(), Key: key})
	if err == nil {
		if a.State != idem.AttemptInFlight {
			r.cache.missed()
		}
		r.cache.put(a, now)
	}
	return a, err
}

// fromCache returns the call's record of key from the replay cache, and
// keeps its rendered replay (kept) for the answer.
func (x *execution) fromCache(key string) (idem.Attempt, bool) {
	a, kept, ok := x.r.cache.get(x.inv.Principal.Scope(), key, x.r.cfg.Clock.Now())
	if ok && kept != nil {
		x.kept, x.keptOf = kept, a.ExecutionID
	}
	return a, ok
}

// startFailure answers a failed reservation or start: an approval consumed
// or expired since the gate means the gate answers again, and it reads the
// key's record first: an execution of this key that consumed the approval
// answers as stage 5 would.
func (x *execution) startFailure(ctx context.Context, err error, raw []byte, reason string) idem.Result {
	if errors.Is(err, idem.ErrApprovalNotConsumable) && x.approval != nil {
		_, existing, gerr := x.approvalGate(ctx, raw, x.approval)
		switch {
		case existing != nil:
			return x.answerExisting(ctx, *existing)
		case gerr != nil:
			return x.fail(gerr)
		}
		return x.fail(idem.Errorf(idem.CodeApprovalRequired, "the approval for this request was used or expired meanwhile; ask again"))
	}
	return x.fail(storeFailure(ctx, err))
}

func exposedOn(m idem.Metadata, s idem.Surface) bool {
	if s == "" {
		return true // the Go API reaches every operation
	}
	for _, have := range m.Surfaces {
		if have == s {
			return true
		}
	}
	return false
}

// fingerprintOf is the fingerprint of the call's intent (SPEC §6.2), its
// JSON body hashed in the canonical form read once (canon).
func (x *execution) fingerprintOf() (string, error) {
	req, err := x.intent()
	if err != nil {
		return "", err
	}
	return canonical.Fingerprint(req)
}

// intent is the call's request as the fingerprint reads it.
func (x *execution) intent() (canonical.Request, error) {
	req := canonical.Request{Method: x.op.meta.Method, Path: x.concretePath(), Query: x.inv.Intent.Query, Opaque: x.opaque, Header: x.headerInputs()}
	if x.op.raw != nil {
		req.Target = x.op.raw.Target
	}
	switch {
	case x.opaque != "":
		req.Body = x.inv.Intent.Body
	case x.canonErr != nil:
		return req, fmt.Errorf("fingerprint body: %w", x.canonErr)
	default:
		req.Body, req.Canonical = x.canon, true
	}
	return req, nil
}

// sameIntent reports whether record a was made for this call's intent,
// judged by the version of the preimage a was made with (SPEC §6.2): a
// record made before the upgrade that added the target to the preimage
// (version 1, or none stored) holds the fingerprint without it, and keeps
// answering its own retries. Only a call with a target can differ by
// version.
func (x *execution) sameIntent(a idem.Attempt) bool {
	if a.Fingerprint == x.fingerprint {
		return true
	}
	if a.FingerprintVersion >= canonical.FingerprintVersion {
		return false
	}
	v1 := x.versionOne()
	return v1 != "" && a.Fingerprint == v1
}

// versionOne is the call's fingerprint under preimage version 1, computed
// once, when first needed (it needs the body); "" when the call has no
// target, whose fingerprint is the same under both versions.
func (x *execution) versionOne() string {
	if x.fingerprintV1 != "" || x.op.raw == nil || x.op.raw.Target == "" {
		return x.fingerprintV1
	}
	if req, err := x.intent(); err == nil {
		x.fingerprintV1, _ = canonical.FingerprintAt(req, 1)
	}
	return x.fingerprintV1
}

// concretePath substitutes the route's parameters.
func (x *execution) concretePath() string {
	return idem.FillPath(x.op.meta.Path, x.inv.Intent.PathParams)
}

// storeFailure maps a store error of the stages before the handler starts
// to the answer: a done context is the caller's cancellation, anything else
// fails closed, saying that nothing was executed.
func storeFailure(ctx context.Context, err error) *idem.Error {
	if ctx.Err() != nil {
		return idem.Errorf(idem.CodeCancelled, "the caller cancelled the request before it ran")
	}
	var e *idem.Error
	if !errors.As(err, &e) {
		e = idem.Unavailable("store", err)
	}
	if e.Code == idem.CodeStoreUnavailable {
		c := *e
		c.Message += "; nothing was executed, retry later"
		return &c
	}
	return e
}

func (x *execution) log(resp idem.Result, took time.Duration) {
	// Attrs, not ...any: nothing is boxed.
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("executionId", x.executionID), slog.String("operation", x.inv.Operation),
		slog.String("org", x.inv.Principal.Org), slog.String("principal", x.inv.Principal.ID),
		slog.Int("status", resp.Status), slog.Int("attempts", x.attempts),
		slog.Bool("keyed", x.key != ""), slog.Bool("replayed", resp.Replayed),
		slog.Int64("durationMs", took.Milliseconds()),
	)
	if resp.Problem != nil {
		attrs = append(attrs, slog.String("code", string(resp.Problem.Code)))
	}
	attrs = x.appendCause(attrs)
	if len(x.policyLog) > 0 {
		attrs = append(attrs, slog.String("policies", strings.Join(x.policyLog, ",")))
	}
	level := slog.LevelInfo
	if resp.Status >= 500 {
		level = slog.LevelWarn
	}
	// The record is made here rather than by Logger.LogAttrs, which looks
	// up its caller's program counter on every line for a source that
	// would always name this function.
	r := slog.NewRecord(time.Now(), level, "execution", 0)
	r.AddAttrs(attrs...)
	_ = x.r.cfg.Logger.Handler().Handle(context.Background(), r)
}

// logs reports whether resp gets its log line: not when the logger drops
// the line's level (nothing is built then), and for a successful replay
// only at Config.ReplayLogRate.
func (r *Runner) logs(resp idem.Result) bool {
	level := slog.LevelInfo
	if resp.Status >= 500 {
		level = slog.LevelWarn
	}
	if !r.cfg.Logger.Enabled(context.Background(), level) {
		return false
	}
	if rate := r.cfg.ReplayLogRate; resp.Replayed && resp.Problem == nil {
		return rate >= 1 || (rate > 0 && mrand.Float64() < rate)
	}
	return true
}

// jsonValue marshals v, for building inputs and outputs.
func jsonValue(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
