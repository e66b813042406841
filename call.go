package idem

import (
	"context"
	"net/http"
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

	status int
	header http.Header
}

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

type callKey struct{}

// CallFromContext returns the Call of the execution ctx belongs to.
func CallFromContext(ctx context.Context) (*Call, bool) {
	c, ok := ctx.Value(callKey{}).(*Call)
	return c, ok
}

func withCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}
