package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Config configures a Runner. Zero fields take the defaults of SPEC
// §6 and §8.
type Config struct {
	Store idem.Store
	Clock idem.Clock
	// Logger gets one line per execution, and the sweeper's reports; nil
	// is silent (an embedding application opts in).
	Logger *slog.Logger
	// ReplayLogRate is the share of successful replays that get a log
	// line, from 0 (none, the default) to 1 (every one), as idem serve's
	// --log-replays: under a retry storm the line per replay is most of a
	// replay's cost, and a replay is no new work. Executions and failed
	// answers are always logged.
	ReplayLogRate float64
	// Sealer encrypts secret results; required when an operation uses
	// transactional_secret_replay.
	Sealer idem.Sealer
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
	Policies []idem.Policy
	// Rules are configured policies and limits (SPEC §8.1); Runner.SetRules
	// replaces them.
	Rules Rules
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
	// SweepInterval is how often the sweeper Start begins sweeps the
	// store (30 s, jittered ± half); negative: no sweeper (another
	// process sweeps this store).
	SweepInterval time.Duration
	// AuditRetention is how long executions and their audit events are
	// kept after they start (7 days); at least Retention. Negative keeps
	// them forever.
	AuditRetention time.Duration
	// DecodeBudget bounds the bytes of request bodies being read and
	// decoded at once, and MaxExecutions the executions running at once;
	// a call beyond either waits up to AdmissionWait, then answers
	// 429 RATE_LIMITED before anything is stored (admission.go).
	// DefaultDecodeBudget, DefaultMaxExecutions and DefaultAdmissionWait
	// when 0; a negative value removes the bound, or the wait.
	DecodeBudget  int64
	MaxExecutions int
	AdmissionWait time.Duration
	// MaxWaiters bounds the calls waiting at once on an in-flight key
	// (Prefer: wait); one beyond it is answered at once, as without the
	// preference (DefaultMaxWaiters when 0; negative: no bound). A waiter
	// holds no body: it needs only the fingerprint.
	MaxWaiters int
	// StoreHook, when set, is called around every store call the runner
	// makes (metrics.Metrics.StoreHook times them); the runner wraps its
	// store once (idem.ObserveStore) for it and for its own spans.
	StoreHook idem.StoreHook
	// TracerProvider, when set, traces every call (tracing.go): a span per
	// call, with children for the store phases and each handler attempt,
	// whose span the handler's ctx carries. nil turns tracing off, at no
	// cost. telemetry.FromEnv builds one from the OTEL_* environment.
	TracerProvider trace.TracerProvider
}

// Report describes one finished call.
type Report struct {
	Operation string
	Status    int
	// Code is the problem's code; empty on success.
	Code     idem.Code
	Keyed    bool
	Replayed bool
	DryRun   bool
	// Attempts is how many handler attempts this call ran (0 for answers
	// that ran none, replays included).
	Attempts int
	// Limit names the configured rate limit that refused the call.
	Limit    string
	Duration time.Duration
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = idem.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&c.Retention, 24*time.Hour)
	setDefault(&c.LeaseGrace, 5*time.Second)
	setDefault(&c.LeaseMargin, DefaultLeaseMargin)
	setDefault(&c.SecretWindow, idem.DefaultSecretReplayWindowMs*time.Millisecond)
	setDefault(&c.ApprovalExpiry, idem.DefaultApprovalExpiry)
	setDefault(&c.PolicyTimeout, 2*time.Second)
	setDefault(&c.MaxWait, 30*time.Second)
	setDefault(&c.AdmissionWait, DefaultAdmissionWait)
	setDefault(&c.SweepInterval, DefaultSweepInterval)
	setDefault(&c.AuditRetention, DefaultAuditRetention)
	if c.DecodeBudget == 0 {
		c.DecodeBudget = DefaultDecodeBudget
	}
	if c.MaxExecutions == 0 {
		c.MaxExecutions = DefaultMaxExecutions
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = DefaultMaxWaiters
	}
	return c
}

// DefaultSweepInterval and DefaultAuditRetention are Config's
// defaults for the sweeper.
const (
	DefaultSweepInterval  = 30 * time.Second
	DefaultAuditRetention = 7 * 24 * time.Hour
)

// DefaultLeaseMargin is Config.LeaseMargin's default.
const DefaultLeaseMargin = time.Second

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func (c Config) validate(reg *idem.Registry, ops map[string]*operation) error {
	if c.Store == nil {
		return errors.New("pipeline: Config.Store is required")
	}
	for name, op := range ops {
		if op.meta.Retry.Enforcement == idem.EnforceTransactionalSecretReplay && c.Sealer == nil {
			return fmt.Errorf("pipeline: operation %q uses transactional_secret_replay: Config.Sealer is required", name)
		}
		if _, ok := c.Store.(idem.Transactor); op.meta.Retry.Transactional && !ok {
			return fmt.Errorf("pipeline: operation %q is transactional: its store must run transactions (idem.Transactor: sqlitestore, pgstore)", name)
		}
	}
	for _, d := range []time.Duration{c.Retention, c.LeaseGrace, c.LeaseMargin, c.SecretWindow, c.ApprovalExpiry, c.PolicyTimeout, c.MaxWait} {
		if d < 0 {
			return errors.New("pipeline: Config durations must not be negative")
		}
	}
	if c.AuditRetention > 0 && c.AuditRetention < c.Retention {
		return fmt.Errorf("pipeline: Config.AuditRetention (%s) is shorter than Retention (%s): executions must outlive the attempt records that name them", c.AuditRetention, c.Retention)
	}
	if c.ReplayLogRate < 0 || c.ReplayLogRate > 1 {
		return fmt.Errorf("pipeline: Config.ReplayLogRate (%g) is a share of replays, from 0 (none) to 1 (every one)", c.ReplayLogRate)
	}
	for _, name := range reg.Names() {
		if lease := ops[name].meta.Lease(c.LeaseGrace); c.LeaseMargin >= lease {
			return fmt.Errorf("pipeline: Config.LeaseMargin (%s) must be less than the lease of operation %q (%s): no attempt could start", c.LeaseMargin, name, lease)
		}
	}
	if err := CheckRetention(reg, c.Retention, c.LeaseGrace, c.LeaseMargin); err != nil {
		return fmt.Errorf("pipeline: Config.Retention: %w", err)
	}
	return nil
}

// CheckRetention reports an error unless retention exceeds the longest
// lease of reg's operations under grace plus margin (SPEC §6.8): a record
// must outlive its lease, or the key of an execution still running, or
// just found indeterminate, could start again.
func CheckRetention(reg *idem.Registry, retention, grace, margin time.Duration) error {
	name, lease := reg.LongestLease(grace)
	if retention > lease+margin {
		return nil
	}
	return fmt.Errorf("the retention %s does not exceed the longest lease plus its margin %s: operation %s has a lease of %s (its timeouts, backoff and the lease grace %s); keep records for longer than %s",
		retention, margin, name, lease, grace, lease+margin)
}

// Runner is the one execution pipeline (SPEC §5) every surface calls.
type Runner struct {
	cfg Config
	// decl holds the declarations calls resolve against; Reload swaps it,
	// and a call keeps the operation it resolved.
	decl  atomic.Pointer[declarations]
	cache *replayCache
	done  completions
	audit *auditQueue
	// decoding and executions are the admission budgets (admission.go).
	decoding, executions budget
	// waiters bounds the calls waiting on an in-flight key.
	waiters budget
	life    lifecycle
	// tracer is nil when tracing is off (tracing.go).
	tracer trace.Tracer
	// rules are the configured policies and limits (rules.go).
	rules atomic.Pointer[rulesHolder]
}

// operation is a registered operation as this runner runs it: the
// registry's, with the runner's configuration in its metadata (the secret
// window).
type operation struct {
	*idem.Compiled
	meta   idem.Metadata
	params []idem.Param
	raw    *idem.RawSpec
}

// descriptor is what the surfaces publish of op, with the runner's
// configuration.
func (op *operation) descriptor() idem.Descriptor {
	d := op.Descriptor()
	d.Metadata = op.meta
	return d
}

// declarations are a registry's operations as a runner runs them.
type declarations struct {
	ops map[string]*operation
	reg *idem.Registry
}

// declare checks reg's operations against cfg and prepares them.
func declare(reg *idem.Registry, cfg Config) (*declarations, error) {
	names := reg.Names()
	ops := make(map[string]*operation, len(names))
	for _, name := range names {
		c, _ := reg.Lookup(name)
		op := &operation{Compiled: c, meta: c.Metadata(), params: c.Params(), raw: c.Raw()}
		if op.meta.Retry.Enforcement == idem.EnforceTransactionalSecretReplay {
			op.meta.Retry.SecretReplayWindowMs = cfg.SecretWindow.Milliseconds()
		}
		ops[name] = op
	}
	if err := cfg.validate(reg, ops); err != nil {
		return nil, err
	}
	return &declarations{ops: ops, reg: reg}, nil
}

// New returns the pipeline over the registry's operations.
func New(reg *idem.Registry, cfg Config) (*Runner, error) {
	cfg = cfg.WithDefaults()
	d, err := declare(reg, cfg)
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, cache: newReplayCache(cfg.ReplayCacheBytes)}
	r.decl.Store(d)
	if cfg.Rules != nil {
		r.SetRules(cfg.Rules)
	}
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	if hook := idem.ChainStoreHooks(r.storeSpans(), cfg.StoreHook); hook != nil {
		r.cfg.Store = idem.ObserveStore(cfg.Store, hook)
	}
	r.audit = newAuditQueue(r.cfg.Store, cfg.Logger)
	r.decoding, r.executions = newBudget(cfg.DecodeBudget), newBudget(int64(cfg.MaxExecutions))
	r.waiters = newBudget(int64(cfg.MaxWaiters))
	return r, nil
}

// Flush waits until the audit of replays and fresh reads answered so far is
// stored (they are written off the request's path), or ctx ends. Call it
// before shutting down.
func (r *Runner) Flush(ctx context.Context) error {
	return r.audit.flush(ctx)
}

// AuditDropped counts the audit items (replays' execution.replayed events,
// fresh reads' executions) that the runner gave up writing: after
// retries while the store was unavailable, or at once when the store
// refused them. metrics exports it as idem_audit_dropped_total.
func (r *Runner) AuditDropped() int64 {
	return r.audit.dropped.Load()
}

// ReplayCacheStats counts the final records of keys the runner answered
// from its replay cache (hits) and read from the store (misses: a record
// the cache did not hold, or may not: secret and indeterminate results);
// both 0 with the cache off. metrics exports them as
// idem_replay_cache_hits_total and idem_replay_cache_misses_total.
func (r *Runner) ReplayCacheStats() (hits, misses int64) {
	if r.cache == nil {
		return 0, 0
	}
	return r.cache.hits.Load(), r.cache.misses.Load()
}

// Describe returns an operation's descriptor as this runner publishes it
// (with its configured secret window).
func (r *Runner) Describe(name string) (idem.Descriptor, bool) {
	c, ok := r.decl.Load().ops[name]
	if !ok {
		return idem.Descriptor{}, false
	}
	return c.descriptor(), true
}

// Reload replaces the operations the runner serves with reg's, checked as
// New checks them; on error nothing changes. Calls that resolved
// their operation before finish under its old declaration; every later
// call resolves against reg (idem proxy reloads its upstream's document
// this way). A key's record keeps the fingerprint it was reserved with.
func (r *Runner) Reload(reg *idem.Registry) error {
	d, err := declare(reg, r.cfg)
	if err != nil {
		return err
	}
	r.decl.Store(d)
	return nil
}

// Descriptors returns every operation's descriptor, sorted by name.
func (r *Runner) Descriptors() []idem.Descriptor {
	d := r.decl.Load()
	out := make([]idem.Descriptor, 0, len(d.reg.Names()))
	for _, name := range d.reg.Names() {
		out = append(out, d.ops[name].descriptor())
	}
	return out
}

// LongestLease is the longest lease under grace of the operations the
// runner serves now (Registry.LongestLease of the current declarations).
func (r *Runner) LongestLease(grace time.Duration) (name string, lease time.Duration) {
	return r.decl.Load().reg.LongestLease(grace)
}
