package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/mcpserver"
)

// Caller sends a tools/call to the upstream (Upstream.Call).
type Caller interface {
	Call(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error)
}

// MaxStoredResult bounds an upstream tool result (1 MiB, as idem proxy
// bounds an upstream answer): a larger one is an error the caller sees,
// never a silent non-replay.
const MaxStoredResult = 1 << 20

// StatusToolError is the HTTP status of an upstream tool result with
// isError: true. It is a 5xx on purpose: the upstream failed after the
// call was sent, perhaps after an effect, so a keyed call's record is
// indeterminate (SPEC §6.3, §17) and a same-key retry says so instead of
// replaying a failure or running the call again.
const StatusToolError = http.StatusBadGateway

// forward is the raw handler of tool name: the body is the arguments,
// sent as they are (the key was taken out by the surface); the answer is
// the upstream's CallToolResult as JSON, of media type
// mcpserver.ToolResultMediaType, 200, or StatusToolError when it is an
// error result. A writing tool's call carries the execution's handler key
// in _meta.idempotencyKey, so that an upstream that deduplicates (another
// idem gateway) can; a traced call carries its trace context there too
// (traceparent, tracestate), under a CLIENT span of its own.
func forward(up Caller, name string, writes bool) idem.RawHandler {
	return func(ctx context.Context, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
		args := json.RawMessage(bytes.TrimSpace(req.Body))
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		params := &mcp.CallToolParams{Name: name, Arguments: args}
		if writes && call.IdempotencyKey != "" {
			params.Meta = mcp.Meta{mcpserver.MetaIdempotencyKey: call.IdempotencyKey}
		}
		if p, ok := mcpserver.ProgressFrom(ctx); ok {
			if w, ok := up.(progressWatcher); ok {
				// The caller asked for progress: the upstream's is passed on.
				token, stop := w.watchProgress(p)
				defer stop()
				if token != "" {
					if params.Meta == nil {
						params.Meta = mcp.Meta{}
					}
					params.Meta["progressToken"] = token
				}
			}
		}
		// A CLIENT span, and the trace context in the call's _meta.
		ctx, end := mcpserver.StartClientCall(ctx, params)
		res, err := up.Call(ctx, params)
		end(res, err)
		if err != nil {
			if idem.IsNotDispatched(err) {
				return idem.RawResponse{}, err
			}
			if ctx.Err() != nil {
				return idem.RawResponse{}, ctx.Err() // the timeout or the caller's cancellation
			}
			return idem.RawResponse{}, fmt.Errorf("tools/call %s on the upstream: %w (the call was sent: it may have taken effect)", name, err)
		}
		body, err := json.Marshal(res)
		if err != nil {
			return idem.RawResponse{}, fmt.Errorf("tools/call %s: the upstream's result: %w", name, err)
		}
		if len(body) > MaxStoredResult {
			return idem.RawResponse{}, idem.Errorf(idem.CodeExecutionFailed, "the upstream's result of tools/call %q is %d bytes, over the %d the gateway stores: the call ran, but its result cannot be replayed", name, len(body), MaxStoredResult)
		}
		status := http.StatusOK
		if res.IsError {
			status = StatusToolError
		}
		return idem.RawResponse{Status: status, Header: http.Header{"Content-Type": {mcpserver.ToolResultMediaType}}, Body: body}, nil
	}
}
