package idem

import (
	"context"
	"net/http"
	"time"
)

// Call is what a handler knows about the execution it runs in. The same
// Call is in the handler's context (CallFromContext), so code deeper down
// can reach the idempotency key without threading it through.
type Call struct {
	Operation   string
	ExecutionID string
	// Attempt counts runtime attempts of this execution, from 1.
	Attempt   int
	Principal Principal
	// IdempotencyKey is the key the handler forwards downstream (to a
	// payment gateway, say): stable across the attempts of one execution,
	// unique across executions. For a keyed call, a same-key retry replays
	// the stored result, so the handler never sees a second key for it.
	IdempotencyKey string
	// RequestKey is the caller's Idempotency-Key, empty for unkeyed calls.
	RequestKey string
	// DryRun is set when the preview handler runs.
	DryRun bool
	// FencingToken identifies the reservation this execution holds (SPEC
	// §6.8); 0 for unkeyed calls and dry runs. Make an effect in the
	// store's database conditional on it in the effect's own transaction
	// (pgstore.CheckFence, sqlitestore.CheckFence, with Fence), and forward
	// it downstream with IdempotencyKey so that a service that can check it
	// refuses a late effect.
	FencingToken int64
	// LeaseDeadline is when the lease of the reservation ends at the
	// latest, by this instance's monotonic clock (conservative: taken
	// before the reservation was sent); zero for unkeyed calls and dry
	// runs. The handler's ctx ends pipeline.Config.LeaseMargin before it, or
	// at the attempt's timeout if that comes first. Forward it (or the time
	// left until it) downstream: past it, another caller may already have
	// been told that the result is indeterminate.
	LeaseDeadline time.Time

	status int
	header http.Header
	tx     any // the store's transaction of a transactional operation
}

// Transaction returns the store's transaction that a transactional
// operation's handler writes through (SPEC §6.7): *sql.Tx on sqlitestore,
// pgx.Tx on pgstore; nil for any other call. sqlitestore.Tx and pgstore.Tx
// return it typed. The handler must not commit or roll it back, nor use it
// once it has returned.
func (c *Call) Transaction() any { return c.tx }

// SetStatus sets the HTTP status of a successful result (the operation's
// SuccessStatus otherwise), e.g. 200 instead of 201 when a create found the
// resource already there.
func (c *Call) SetStatus(status int) { c.status = status }

// Header returns response headers the handler may set. Location and ETag
// are kept for replays; others are answered once.
func (c *Call) Header() http.Header {
	if c.header == nil {
		c.header = http.Header{}
	}
	return c.header
}

// Fence returns the reservation this call holds, for fence checks.
func (c *Call) Fence() Fence {
	return Fence{Scope: c.Principal.Scope(), Key: c.RequestKey, FencingToken: c.FencingToken}
}

// Fence names a reservation: the attempt record of (Scope, Key) while it
// is in flight under FencingToken. A zero FencingToken names none (an
// unkeyed call), and every fence check passes for it.
type Fence struct {
	Scope        Scope
	Key          string
	FencingToken int64
}

// LeaseLost is the error of an effect refused by a fence check: the
// reservation f is no longer in flight under its token with its lease
// held. It wraps ErrFenced. The effect was not applied by this attempt;
// the record is (or becomes) indeterminate.
func LeaseLost(f Fence) *Error {
	e := Errorf(CodeTimeout, "the lease of idempotency key %q passed before this attempt's effect could commit (fencing token %d); the effect was not applied by it", f.Key, f.FencingToken)
	e.Retryable = false
	e.Err = ErrFenced
	return e
}

type callKey struct{}

// CallFromContext returns the Call of the execution ctx belongs to.
func CallFromContext(ctx context.Context) (*Call, bool) {
	c, ok := ctx.Value(callKey{}).(*Call)
	return c, ok
}

// Status returns the status the handler set with SetStatus, 0 for none.
func (c *Call) Status() int { return c.status }

// ResponseHeader returns the headers the handler set with Header, nil for
// none.
func (c *Call) ResponseHeader() http.Header { return c.header }

// WithTransaction makes tx the store's transaction the call's handler
// writes through (Transaction). The engine (package pipeline) sets it
// before a transactional operation's handler runs.
func WithTransaction(c *Call, tx any) { c.tx = tx }

// WithCall returns ctx carrying c, for CallFromContext: the engine gives
// it to the handler of each attempt.
func WithCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}
