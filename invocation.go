package idem

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Invocation is one call as a surface hands it to the runner (SPEC §5
// stage 1), typed: each surface parses its own transport once (HTTP its
// headers and query string, MCP its arguments, the Go API nothing) and
// the runner reads nothing of any transport.
type Invocation struct {
	Operation string
	Surface   Surface
	Principal Principal
	// Key is the idempotency key the caller sent, "" for none. The runner
	// checks it (ValidateKey) on every operation but fresh_read, which
	// ignores a key entirely (SPEC §4, RetryContract.ReadsKey). What a
	// transport cannot read as one key (a repeated or empty
	// Idempotency-Key header, ParseKeyHeader) it refuses itself.
	Key string
	// DryRun asks for the operation's preview (SPEC §6.6); the transport
	// parses its control parameter (ParseDryRun) and leaves it out of the
	// intent.
	DryRun bool
	// Wait is how long the caller waits on an in-flight record before it
	// is answered (Prefer: wait=N); the runner caps it
	// (pipeline.Config.MaxWait).
	Wait time.Duration
	// Connection, when set, ends when the caller's connection drops (an
	// HTTP client hanging up, an MCP stream closing). It cancels the call,
	// except a keyed call once its reservation is taken, which runs on so
	// that the same-key retry finds its result (SPEC §7). The context
	// given to Call is the caller's explicit cancellation (MCP's
	// notifications/cancelled, the Go API's), which always cancels.
	Connection context.Context
	// Intent is what the call asks for: everything its fingerprint hashes.
	Intent Intent
	// ReleaseBody gives back the decode budget the surface took with
	// AdmitBody before reading the body; the runner calls it once the
	// input is decoded. When nil, the runner takes len(Body) itself.
	ReleaseBody func()
}

// Intent is what a call asks for, in the shape of the HTTP request of the
// same intent, so that one intent has one fingerprint on every surface
// (SPEC §6.2).
type Intent struct {
	// PathParams fill the route's {name} segments (decoded values).
	PathParams map[string]string
	// Query is the query without the control parameter dryRun
	// (IntentQuery).
	Query url.Values
	// Header holds the operation's declared header inputs (in:"header")
	// under their headers' names, and no other header. Over MCP and the Go
	// API a header input is an ordinary argument that the surface puts here
	// (PlaceArguments), so the intent is the HTTP call's.
	Header http.Header
	// Body is the JSON body; empty means none. For a raw operation
	// (DefineRaw) it may be of another media type, named by ContentType.
	Body []byte
	// ContentType is the body's Content-Type as sent; only raw operations
	// read it (a body that is not JSON is fingerprinted byte for byte).
	ContentType string
	// Passthrough holds the request's own headers for a raw operation to
	// forward (RawRequest.Header; idem proxy). It is never part of the
	// intent and nil where the surface has none (MCP, the Go API).
	Passthrough http.Header
}

// ReadsKey reports whether a call of an operation with this contract
// examines the idempotency key it was sent: every kind but fresh_read,
// which ignores an incidental key entirely, not even parsing it (SPEC
// §4). Surfaces ask it before they read a key from their transport.
func (c RetryContract) ReadsKey() bool { return c.Kind != RetryFreshRead }
