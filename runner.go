package idem

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"idem/canonical"
)

// RunnerConfig configures a Runner. Zero fields take the defaults of SPEC
// §6 and §8.
type RunnerConfig struct {
	Store Store
	Clock Clock
	// Logger gets one line per execution; slog.Default() when nil.
	Logger *slog.Logger
	// Sealer encrypts secret results; required when an operation uses
	// transactional_secret_replay.
	Sealer Sealer
	// Retention is how long attempt records are kept (24 h). It must
	// exceed the longest lease of any operation plus LeaseMargin.
	Retention time.Duration
	// LeaseGrace is added to an execution's own bound to make its lease (5 s).
	LeaseGrace time.Duration
	// LeaseMargin is the safety margin of a lease (1 s, SPEC §6.8): no
	// attempt starts with less of its lease left, and a handler's context
	// ends this long before the lease does. It covers the time an effect
	// needs to commit and the error of the instance's view of the store's
	// clock. It must be less than every operation's lease.
	LeaseMargin time.Duration
	// SecretWindow is how long a secret result can be replayed (15 min).
	SecretWindow time.Duration
	// ApprovalExpiry is how long an approval stays decidable and usable (15 min).
	ApprovalExpiry time.Duration
	// Policies apply to every operation, before the operation's own.
	Policies []Policy
	// PolicyTimeout bounds all policies of one call (2 s).
	PolicyTimeout time.Duration
	// MaxWait caps Prefer: wait (30 s).
	MaxWait time.Duration
	// Observe, if set, is told about every finished call (for metrics).
	Observe func(Report)
	// ReplayCacheBytes bounds the in-memory copies of completed records
	// that answer replays without a store round trip (16 MiB when 0; a
	// negative value turns the cache off).
	ReplayCacheBytes int
	// DecodeBudget bounds the bytes of request bodies being read and
	// decoded at once, and MaxExecutions the executions running at once;
	// a call beyond either waits up to AdmissionWait, then answers
	// 429 RATE_LIMITED before anything is stored (admission.go).
	// DefaultDecodeBudget, DefaultMaxExecutions and DefaultAdmissionWait
	// when 0; a negative value removes the bound, or the wait.
	DecodeBudget  int64
	MaxExecutions int
	AdmissionWait time.Duration
}

// Report describes one finished call.
type Report struct {
	Operation string
	Status    int
	// Code is the problem's code; empty on success.
	Code     Code
	Keyed    bool
	Replayed bool
	DryRun   bool
	// Attempts is how many handler attempts this call ran (0 for answers
	// that ran none, replays included).
	Attempts int
	Duration time.Duration
}

// WithDefaults fills unset fields.
func (c RunnerConfig) WithDefaults() RunnerConfig {
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	setDefault(&c.Retention, 24*time.Hour)
	setDefault(&c.LeaseGrace, 5*time.Second)
	setDefault(&c.LeaseMargin, DefaultLeaseMargin)
	setDefault(&c.SecretWindow, DefaultSecretReplayWindowMs*time.Millisecond)
	setDefault(&c.ApprovalExpiry, DefaultApprovalExpiry)
	setDefault(&c.PolicyTimeout, 2*time.Second)
	setDefault(&c.MaxWait, 30*time.Second)
	setDefault(&c.AdmissionWait, DefaultAdmissionWait)
	if c.DecodeBudget == 0 {
		c.DecodeBudget = DefaultDecodeBudget
	}
	if c.MaxExecutions == 0 {
		c.MaxExecutions = DefaultMaxExecutions
	}
	return c
}

// DefaultLeaseMargin is RunnerConfig.LeaseMargin's default.
const DefaultLeaseMargin = time.Second

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func (c RunnerConfig) validate(reg *Registry, ops map[string]*compiled) error {
	if c.Store == nil {
		return errors.New("idem: RunnerConfig.Store is required")
	}
	for name, op := range ops {
		if op.meta.Retry.Enforcement == EnforceTransactionalSecretReplay && c.Sealer == nil {
			return fmt.Errorf("idem: operation %q uses transactional_secret_replay: RunnerConfig.Sealer is required", name)
		}
	}
	for _, d := range []time.Duration{c.Retention, c.LeaseGrace, c.LeaseMargin, c.SecretWindow, c.ApprovalExpiry, c.PolicyTimeout, c.MaxWait} {
		if d < 0 {
			return errors.New("idem: RunnerConfig durations must not be negative")
		}
	}
	for _, name := range reg.sorted {
		if lease := ops[name].meta.Lease(c.LeaseGrace); c.LeaseMargin >= lease {
			return fmt.Errorf("idem: RunnerConfig.LeaseMargin (%s) must be less than the lease of operation %q (%s): no attempt could start", c.LeaseMargin, name, lease)
		}
	}
	if err := CheckRetention(reg, c.Retention, c.LeaseGrace, c.LeaseMargin); err != nil {
		return fmt.Errorf("idem: RunnerConfig.Retention: %w", err)
	}
	return nil
}

// CheckRetention reports an error unless retention exceeds the longest
// lease of reg's operations under grace plus margin (SPEC §6.8): a record
// must outlive its lease, or the key of an execution still running, or
// just found indeterminate, could start again.
func CheckRetention(reg *Registry, retention, grace, margin time.Duration) error {
	name, lease := reg.LongestLease(grace)
	if retention > lease+margin {
		return nil
	}
	return fmt.Errorf("the retention %s does not exceed the longest lease plus its margin %s: operation %s has a lease of %s (its timeouts, backoff and the lease grace %s); keep records for longer than %s",
		retention, margin, name, lease, grace, lease+margin)
}

// Runner is the one execution pipeline (SPEC §5) every surface calls.
type Runner struct {
	cfg   RunnerConfig
	ops   map[string]*compiled
	reg   *Registry
	cache *replayCache
	done  completions
	audit *auditQueue
	// decoding and executions are the admission budgets (admission.go).
	decoding, executions budget
}

// NewRunner returns the pipeline over the registry's operations.
func NewRunner(reg *Registry, cfg RunnerConfig) (*Runner, error) {
	cfg = cfg.WithDefaults()
	ops := make(map[string]*compiled, len(reg.ops))
	for name, op := range reg.ops {
		c := *op
		if c.meta.Retry.Enforcement == EnforceTransactionalSecretReplay {
			c.meta.Retry.SecretReplayWindowMs = cfg.SecretWindow.Milliseconds()
		}
		ops[name] = &c
	}
	if err := cfg.validate(reg, ops); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, ops: ops, reg: reg, cache: newReplayCache(cfg.ReplayCacheBytes), audit: newAuditQueue(cfg.Store, cfg.Logger)}
	r.decoding, r.executions = newBudget(cfg.DecodeBudget), newBudget(int64(cfg.MaxExecutions))
	if feed, ok := cfg.Store.(CompletionFeed); ok {
		if keys := feed.Completions(context.Background()); keys != nil {
			// Completions by other instances wake this one's waiters; the
			// feed ends when the store closes.
			go func() {
				for k := range keys {
					r.done.finished(k.Scope, k.Key)
				}
			}()
		}
	}
	return r, nil
}

// Flush waits until the audit events of replays answered so far are
// stored (they are written off the request's path), or ctx ends. Call it
// before shutting down.
func (r *Runner) Flush(ctx context.Context) error {
	return r.audit.flush(ctx)
}

// Describe returns an operation's descriptor as this runner publishes it
// (with its configured secret window).
func (r *Runner) Describe(name string) (Descriptor, bool) {
	c, ok := r.ops[name]
	if !ok {
		return Descriptor{}, false
	}
	return Descriptor{Metadata: c.meta, InputSchema: c.input.JSON(), OutputSchema: c.output.JSON(), Params: append([]Param(nil), c.params...)}, true
}

// Descriptors returns every operation's descriptor, sorted by name.
func (r *Runner) Descriptors() []Descriptor {
	out := make([]Descriptor, 0, len(r.reg.sorted))
	for _, name := range r.reg.sorted {
		d, _ := r.Describe(name)
		out = append(out, d)
	}
	return out
}

// Request is one call as a surface received it (SPEC §5 stage 1), in the
// shape of an HTTP request so that the same intent has the same fingerprint
// on every surface.
type Request struct {
	Operation string
	Surface   Surface
	Principal Principal
	// PathParams fill the route's {name} segments (decoded values).
	PathParams map[string]string
	// Query is the query string as received; the control parameter dryRun
	// in it (ParseDryRun) asks for a preview.
	Query url.Values
	// Body is the raw JSON body; empty means none.
	Body []byte
	// KeyHeader holds the Idempotency-Key values as received; nil when
	// absent. It is not examined on fresh_read operations.
	KeyHeader []string
	// Wait is the Prefer: wait the caller asked for.
	Wait time.Duration
	// Detachable says ctx ends when the connection drops (HTTP): a keyed
	// execution then keeps running once its reservation is taken, so that
	// the same-key retry finds it. Explicit cancellation (MCP, the Go API)
	// leaves it false: cancelling ctx cancels the execution.
	Detachable bool
	// ReleaseBody gives back the decode budget the surface took with
	// AdmitBody before reading Body; the runner calls it once the input is
	// decoded. When nil, the runner takes len(Body) itself.
	ReleaseBody func()
}

// newID returns prefix + a time-ordered, random, URL-safe id (ULID-like:
// 48 bits of milliseconds, 80 random bits, base32).
func newID(prefix string, now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Call runs one call through the pipeline and returns its one final
// answer. It never returns an error: every failure is a Response.
func (r *Runner) Call(ctx context.Context, req Request) Response {
	start := r.cfg.Clock.Now()
	x := &execution{r: r, req: req, start: start}
	resp := x.run(ctx)
	took := r.cfg.Clock.Now().Sub(start)
	x.log(resp, took)
	if r.cfg.Observe != nil {
		rep := Report{Operation: req.Operation, Status: resp.Status, Keyed: x.key != "", Replayed: resp.Replayed, DryRun: x.dryRun, Duration: took}
		if !resp.Replayed {
			rep.Attempts = x.attempts
		}
		if resp.Problem != nil {
			rep.Code = resp.Problem.Code
		}
		r.cfg.Observe(rep)
	}
	return resp
}

// execution is the state of one pass through the pipeline.
type execution struct {
	r           *Runner
	req         Request
	op          *compiled
	start       time.Time
	key         string // the valid idempotency key, "" when unkeyed
	dryRun      bool   // the request asks for a preview
	fingerprint string
	executionID string
	attempts    int
	// leaseDeadline bounds the reservation's lease by the monotonic clock
	// (zero when unkeyed); runAttempts tightens it from the store.
	leaseDeadline time.Time
	replayed      bool
	policyLog     []string
}

func (x *execution) meta() *Meta {
	m := &Meta{ExecutionID: x.executionID, Attempts: x.attempts}
	if x.op != nil {
		m.Operation = x.op.meta.Name
	}
	if x.key != "" {
		m.Idempotency = &IdempotencyMeta{Key: x.key}
	}
	return m
}

// fail answers with e and the meta known so far.
func (x *execution) fail(e *Error) Response {
	return problemResponse(NewProblem(e, x.meta()))
}

func (x *execution) run(ctx context.Context) Response {
	r, req := x.r, x.req
	// Stage 2: resolve.
	op, ok := r.ops[req.Operation]
	if !ok || !exposedOn(op.meta, req.Surface) {
		return x.fail(Errorf(CodeOperationNotFound, "no operation named %q on this surface", req.Operation))
	}
	x.op = op
	// Stage 3: the control parameter dryRun, then the contract checks
	// that read it, in the order of SPEC §6.4. From here on the query is
	// the intent's: dryRun is left out of the fingerprint and the input
	// only once it is known to be valid.
	dry, derr := ParseDryRun(req.Query[DryRunParam])
	if derr != nil {
		return x.fail(AsError(derr))
	}
	x.dryRun, x.req.Query = dry, intentQuery(req.Query)
	req = x.req
	if err := x.checkContract(); err != nil {
		return x.fail(err)
	}
	// Stages 4 and 5 from memory hold a share of the decode budget.
	releaseInput, aerr := x.admitInput(ctx)
	if aerr != nil {
		return x.fail(aerr)
	}
	defer releaseInput()
	fp, ferr := canonical.Fingerprint(canonical.Request{Method: op.meta.Method, Path: x.concretePath(), Query: req.Query, Body: req.Body})
	if x.key != "" && ferr == nil {
		// Stage 5 from memory first: a completed record of this exact
		// request passed stage 4 when it ran, so its replay needs no
		// decoding.
		if a, ok := r.cache.get(req.Principal.Scope(), x.key, r.cfg.Clock.Now()); ok && a.Fingerprint == fp {
			x.fingerprint = fp
			return x.answerExisting(ctx, a)
		}
	}
	// Stage 4: input.
	raw, in, err := x.decodeInput()
	releaseInput()
	if err != nil {
		return x.fail(err)
	}
	if ferr != nil {
		return x.fail(Errorf(CodeInvalidInput, "the body is not canonical JSON: %v", ferr).WithDetail("errors", []map[string]string{{"path": "", "message": ferr.Error()}}))
	}
	x.fingerprint = fp
	// Stage 5: an existing attempt answers before any policy or approval.
	if x.key != "" {
		a, err := r.getAttempt(ctx, req.Principal.Scope(), x.key)
		switch {
		case err == nil:
			return x.answerExisting(ctx, a)
		case !errors.Is(err, ErrNotFound):
			return x.fail(storeFailure(ctx, err))
		}
	}
	// Stage 6: policies.
	approvalNeeded, reason, perr := x.evaluatePolicies(ctx, in, raw)
	if perr != nil {
		return x.fail(perr)
	}
	// Admission of the execution, before anything is stored.
	releaseExecution, aerr := x.admitExecution(ctx)
	if aerr != nil {
		return x.fail(aerr)
	}
	defer releaseExecution()
	if x.dryRun {
		return x.preview(ctx, in)
	}
	// Stage 7: approval gate.
	approvalID := ""
	if approvalNeeded {
		id, existing, err := x.approvalGate(ctx, raw, reason)
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
	x.executionID = newID("exe_", r.cfg.Clock.Now())
	start := StartParams{ExecutionID: x.executionID, Scope: req.Principal.Scope(), Operation: op.meta.Name, Fingerprint: fp, ApprovalID: approvalID}
	// The write runs detached from the caller's cancellation, so that its
	// outcome is known: a commit cut off by a cancellation could otherwise
	// leave a reservation nobody finishes. A cancellation that arrived
	// meanwhile is honoured before the handler starts (execute).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalizeTimeout)
	defer cancel()
	var fence int64
	if x.key != "" {
		// The store starts the lease after t0, so t0 + lease is a
		// deadline the lease cannot outlast, by the monotonic clock.
		lease := op.meta.Lease(r.cfg.LeaseGrace)
		t0 := time.Now()
		res, err := r.cfg.Store.Reserve(sctx, ReserveParams{StartParams: start, Key: x.key, Lease: lease, Retention: r.cfg.Retention})
		if err != nil {
			x.executionID = ""
			return x.startFailure(ctx, err, raw, reason)
		}
		if !res.Reserved {
			x.executionID = ""
			releaseExecution() // answering the existing record (or waiting on it) is no execution
			r.cache.put(res.Attempt, r.cfg.Clock.Now())
			return x.answerExisting(ctx, res.Attempt)
		}
		fence = res.Attempt.FencingToken
		x.leaseDeadline = t0.Add(lease)
		r.done.started(req.Principal.Scope(), x.key)
	} else if _, err := r.cfg.Store.StartExecution(sctx, start); err != nil {
		x.executionID = ""
		return x.startFailure(ctx, err, raw, reason)
	}
	// Stages 10 to 13.
	return x.execute(ctx, in, fence)
}

// getAttempt reads the record of (scope, key), from the replay cache when
// it holds it.
func (r *Runner) getAttempt(ctx context.Context, scope Scope, key string) (Attempt, error) {
	now := r.cfg.Clock.Now()
	if a, ok := r.cache.get(scope, key, now); ok {
		return a, nil
	}
	a, err := r.cfg.Store.GetAttempt(ctx, scope, key)
	if err == nil {
		r.cache.put(a, now)
	}
	return a, err
}

// startFailure answers a failed reservation or start: an approval consumed
// or expired since the gate means the gate answers again, and it reads the
// key's record first: an execution of this key that consumed the approval
// answers as stage 5 would.
func (x *execution) startFailure(ctx context.Context, err error, raw []byte, reason string) Response {
	if errors.Is(err, ErrApprovalNotConsumable) {
		_, existing, gerr := x.approvalGate(ctx, raw, reason)
		switch {
		case existing != nil:
			return x.answerExisting(ctx, *existing)
		case gerr != nil:
			return x.fail(gerr)
		}
		return x.fail(Errorf(CodeApprovalRequired, "the approval for this request was used or expired meanwhile; ask again"))
	}
	return x.fail(storeFailure(ctx, err))
}

func exposedOn(m Metadata, s Surface) bool {
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

// checkContract applies the contract checks of SPEC §6.4 in order.
func (x *execution) checkContract() *Error {
	m, req, dry := x.op.meta, x.req, x.dryRun
	if m.Retry.Kind != RetryFreshRead && req.KeyHeader != nil {
		key, err := ParseKeyHeader(req.KeyHeader)
		if err != nil {
			return AsError(err)
		}
		if e := KeyWithDryRun(true, dry); e != nil {
			return e
		}
		x.key = key
	}
	if dry && !m.Retry.Preview {
		x.key = ""
		return Errorf(CodeDryRunNotSupported, "operation %s has no preview (retry.preview is false); remove dryRun=true", m.Name)
	}
	if x.key != "" && m.Retry.Kind != RetrySameKeyReplay {
		x.key = ""
		return Errorf(CodeIdempotencyKeyNotSupported, "operation %s is %s: it takes no Idempotency-Key; follow retry.kind in the catalog", m.Name, m.Retry.Kind)
	}
	if x.key == "" && !dry && m.Retry.Kind == RetrySameKeyReplay && req.Principal.MustSendKey() {
		return Errorf(CodeIdempotencyKeyRequired, "operation %s replays by key: generate a key, record it in durable task state, and send it as Idempotency-Key", m.Name)
	}
	return nil
}

// concretePath substitutes the route's parameters.
func (x *execution) concretePath() string { return FillPath(x.op.meta.Path, x.req.PathParams) }

// storeFailure maps a store error of the stages before the handler starts
// to the answer: a done context is the caller's cancellation, anything else
// fails closed, saying that nothing was executed.
func storeFailure(ctx context.Context, err error) *Error {
	if ctx.Err() != nil {
		return Errorf(CodeCancelled, "the caller cancelled the request before it ran")
	}
	var e *Error
	if !errors.As(err, &e) {
		e = Unavailable("store", err)
	}
	if e.Code == CodeStoreUnavailable {
		c := *e
		c.Message += "; nothing was executed, retry later"
		return &c
	}
	return e
}

func (x *execution) log(resp Response, took time.Duration) {
	attrs := []any{
		slog.String("executionId", x.executionID), slog.String("operation", x.req.Operation),
		slog.String("org", x.req.Principal.Org), slog.String("principal", x.req.Principal.ID),
		slog.Int("status", resp.Status), slog.Int("attempts", x.attempts),
		slog.Bool("keyed", x.key != ""), slog.Bool("replayed", resp.Replayed),
		slog.Int64("durationMs", took.Milliseconds()),
	}
	if resp.Problem != nil {
		attrs = append(attrs, slog.String("code", string(resp.Problem.Code)))
	}
	if len(x.policyLog) > 0 {
		attrs = append(attrs, slog.String("policies", strings.Join(x.policyLog, ",")))
	}
	level := slog.LevelInfo
	if resp.Status >= 500 {
		level = slog.LevelWarn
	}
	x.r.cfg.Logger.Log(context.Background(), level, "execution", attrs...)
}

// jsonValue marshals v, for building inputs and outputs.
func jsonValue(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
