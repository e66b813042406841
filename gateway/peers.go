package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/mcpserver"
)

// What an upstream sends during a tool call (sampling/createMessage,
// elicitation/create, notifications/message) belongs to that call's MCP
// client, the one that sent tools/call to idem: never to another client
// of the upstream's one shared session (docs/gateway.md, "Sampling,
// elicitation and logging"). Which call it belongs to is decided as the
// message is read, and written in its params._meta (metaCall) for the
// handler:
//   - over streamable HTTP the upstream sends it on the call's own SSE
//     stream, and resumingStream tags it with the call's tag, a random
//     value the upstream never sees, so it cannot name another call; one
//     that came elsewhere (the standalone stream) belongs to no call;
//   - over stdio there is no stream per call: the line reader tags it
//     with the only call in flight on the upstream, and with none when
//     there are none or several (noCall: refused, or not relayed);
//   - in MCP 2026-07-28's multi round-trip, the SDK asks the client's
//     handlers on the call's own context, which names the call.
//
// A log or progress message read before the call's result is relayed
// before that result goes back (inflight.settle), so that the client gets
// it on the call's stream, before the result.

// metaCall is the _meta member that tags a message with its call.
const metaCall = "io.idem/call"

// noCall prefixes the tag of a stdio message that belongs to no call,
// then the number of calls that were in flight.
const noCall = "none:"

// settleWait bounds how long a call's result waits for the log and
// progress messages that came before it to be relayed.
const settleWait = time.Second

// relayed are the methods the gateway relays to a call's client.
var relayed = map[string]bool{"sampling/createMessage": true, "elicitation/create": true, "notifications/message": true}

// isRequest says whether data may be a request or a notification: it has
// a member "method" (inside a JSON string the quotes would be escaped).
// Only those are decoded as they are read; a tool result seldom is one.
func isRequest(data []byte) bool {
	return bytes.Contains(data, []byte(`"method"`))
}

// inflight is a tool call the upstream holds.
type inflight struct {
	tag      string
	peer     *mcpserver.Peer // the call's MCP client; nil for a call over HTTP
	ctx      context.Context // the call's (its timeout, its cancellation)
	progress string          // the call's progressToken (the gateway's), if any

	mu      sync.Mutex
	pending int           // log and progress messages read, not yet relayed
	idle    chan struct{} // closed when pending is back to 0 (settle)
	refused error         // a request of a multi round-trip not relayed
	asking  int           // requests relayed to the client, not yet answered
}

// maxAsking bounds the requests of one call relayed to its client at
// once: an upstream that sends more while they wait is refused, so that
// it cannot hold an unbounded number of goroutines and client requests.
const maxAsking = 8

// refusal is why a request of the call's multi round-trip was not
// relayed; nil when none was refused.
func (c *inflight) refusal() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

// note counts a log or progress message read for the call.
func (c *inflight) note() {
	c.mu.Lock()
	c.pending++
	c.mu.Unlock()
}

// noted counts one relayed (or dropped).
func (c *inflight) noted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == 0 {
		return
	}
	c.pending--
	if c.pending == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// settle waits, at most settleWait, until the log and progress messages
// read for the call have been relayed.
func (c *inflight) settle(ctx context.Context) {
	c.mu.Lock()
	if c.pending <= 0 {
		c.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	c.idle = idle
	c.mu.Unlock()
	t := time.NewTimer(settleWait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
	}
}

// enter counts a call in flight, of the progressToken progress (""
// for none); leave ends it.
func (u *Upstream) enter(ctx context.Context, progress string) (call *inflight, leave func()) {
	var b [16]byte
	rand.Read(b[:])
	call = &inflight{tag: hex.EncodeToString(b[:]), ctx: ctx, progress: progress}
	call.peer, _ = mcpserver.PeerFrom(ctx)
	u.relay.mu.Lock()
	defer u.relay.mu.Unlock()
	if u.relay.calls == nil {
		u.relay.calls = map[string]*inflight{}
	}
	u.relay.calls[call.tag] = call
	return call, func() {
		u.relay.mu.Lock()
		delete(u.relay.calls, call.tag)
		u.relay.mu.Unlock()
	}
}

// attribute is a stdio line tagged with the only call in flight, or
// with noCall; nil when it is no message the gateway relays.
func (u *Upstream) attribute(line []byte) []byte {
	if !isRequest(line) {
		return nil
	}
	if token := progressOf(line); token != "" {
		if call := u.callByProgress(token); call != nil {
			call.note()
		}
		return nil
	}
	u.relay.mu.Lock()
	n := len(u.relay.calls)
	var only *inflight
	for _, call := range u.relay.calls {
		if n == 1 {
			only = call
		}
	}
	u.relay.mu.Unlock()
	tag := noCall + strconv.Itoa(n)
	if only != nil {
		tag = only.tag
	}
	out, method := tagged(line, tag)
	if out != nil && only != nil && method == "notifications/message" {
		only.note()
	}
	return out
}

// callByProgress is the call in flight of the progressToken token.
func (u *Upstream) callByProgress(token string) *inflight {
	u.relay.mu.Lock()
	defer u.relay.mu.Unlock()
	for _, call := range u.relay.calls {
		if call.progress == token {
			return call
		}
	}
	return nil
}

// progressOf is the progressToken of a notifications/progress message
// whose token is a string; "" for any other message.
func progressOf(data []byte) string {
	if !bytes.Contains(data, []byte(`"notifications/progress"`)) {
		return ""
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Token any `json:"progressToken"`
		} `json:"params"`
	}
	if json.Unmarshal(data, &msg) != nil || msg.Method != "notifications/progress" {
		return ""
	}
	token, _ := msg.Params.Token.(string)
	return token
}

// callOf is the call a message belongs to (its tag, or the context of a
// multi round-trip); the error says why there is none.
func (u *Upstream) callOf(ctx context.Context, meta mcp.Meta) (*inflight, error) {
	tag, _ := meta[metaCall].(string)
	if d := dispatchOf(ctx); d != nil && d.call != nil {
		tag = d.call.tag
	}
	u.relay.mu.Lock()
	call, ok := u.relay.calls[tag]
	u.relay.mu.Unlock()
	switch {
	case ok && tag != "":
		return call, nil
	case u.cfg.URL != "":
		return nil, errors.New("it came outside the stream of any tool call in flight, so it belongs to no caller")
	case strings.HasPrefix(tag, noCall) && tag != noCall+"0":
		return nil, fmt.Errorf("%s tool calls were in flight on this stdio upstream, which has no stream per call, so which caller it belongs to cannot be told", strings.TrimPrefix(tag, noCall))
	case strings.HasPrefix(tag, noCall):
		return nil, errors.New("no tool call was in flight on this upstream, so it belongs to no caller")
	}
	return nil, errors.New("its tool call is no longer in flight")
}

// peerFor is the client to relay a request of method to, when it
// declared capability (can); otherwise the JSON-RPC error the upstream
// gets, saying why. ctx is the request's, ended with the call too.
func (u *Upstream) peerFor(ctx context.Context, method, capability string, meta mcp.Meta, can func(*mcpserver.Peer) bool) (*mcpserver.Peer, context.Context, func(), error) {
	call, err := u.callOf(ctx, meta)
	if err != nil {
		return nil, nil, nil, refuse("idem gateway did not relay %s: %v", method, err)
	}
	err = nil
	switch {
	case call.peer == nil:
		err = refuse("idem gateway did not relay %s: the tool call came over idem's HTTP API, not from an MCP client, so no client can answer it", method)
	case !can(call.peer):
		err = refuse("the client calling through idem gateway did not declare %s", capability)
	default:
		call.mu.Lock()
		if call.asking >= maxAsking {
			err = refuse("idem gateway did not relay %s: %d requests of this tool call already wait on its client; send the next when one is answered", method, maxAsking)
		} else {
			call.asking++
		}
		call.mu.Unlock()
	}
	if err != nil {
		if d := dispatchOf(ctx); d != nil && d.call == call {
			// Asked on the call's own context (a multi round-trip): the
			// call fails, and says why.
			call.mu.Lock()
			call.refused = err
			call.mu.Unlock()
		}
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(call.ctx, func() { cancel(fmt.Errorf("the tool call ended")) })
	return call.peer, ctx, func() {
		stop()
		cancel(nil)
		call.mu.Lock()
		call.asking--
		call.mu.Unlock()
	}, nil
}

// refuse is the JSON-RPC error the upstream gets for a request not
// relayed, -32600 with the reason. Not -32601 (method not found), which
// a client without the capability would answer: go-sdk v1.8.0 puts its
// own "method not found" in place of the reason (seen by the upstream's
// tool in the tests).
func refuse(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// withoutOurs is meta without the io.idem/ members: the tag, and any an
// upstream wrote itself.
func withoutOurs(meta mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range meta {
		if strings.HasPrefix(k, "io.idem/") {
			continue
		}
		if out == nil {
			out = mcp.Meta{}
		}
		out[k] = v
	}
	return out
}

// relayPeers sets the client's handlers of what the upstream sends for a
// call's client: sampling and elicitation (which the client so declares
// to the upstream) and log messages.
func (u *Upstream) relayPeers(opts *mcp.ClientOptions) {
	opts.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		p, ctx, done, err := u.peerFor(ctx, "sampling/createMessage", "sampling", req.Params.Meta, (*mcpserver.Peer).Sampling)
		if err != nil {
			return nil, err
		}
		defer done()
		params := *req.Params
		params.Meta = withoutOurs(params.Meta)
		return p.CreateMessage(ctx, &params)
	}
	opts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		p, ctx, done, err := u.peerFor(ctx, "elicitation/create", "elicitation", req.Params.Meta, (*mcpserver.Peer).Elicitation)
		if err != nil {
			return nil, err
		}
		defer done()
		params := *req.Params
		params.Meta = withoutOurs(params.Meta)
		return p.Elicit(ctx, &params)
	}
	opts.LoggingMessageHandler = func(ctx context.Context, req *mcp.LoggingMessageRequest) {
		call, err := u.callOf(ctx, req.Params.Meta)
		if call != nil {
			defer call.noted()
			if call.peer == nil {
				err = errors.New("its tool call came over idem's HTTP API, not from an MCP client")
			}
		}
		if err != nil {
			data, _ := json.Marshal(req.Params.Data)
			if len(data) > 200 {
				data = append(data[:200], "…"...)
			}
			u.log.Debug("the upstream's log message is not relayed", "upstream", u.Describe(), "why", err.Error(),
				"level", req.Params.Level, "logger", req.Params.Logger, "data", string(data))
			return
		}
		params := *req.Params
		params.Meta = withoutOurs(params.Meta)
		_ = call.peer.Log(&params)
	}
}

// withLogLevel is params with the log level the upstream sends at
// (MCP 2026-07-28 takes it with each request: "debug", as logging/setLevel
// says on older versions), for a call whose client can take its log
// messages.
func withLogLevel(cs *mcp.ClientSession, call *inflight, params *mcp.CallToolParams) *mcp.CallToolParams {
	res := cs.InitializeResult()
	if call.peer == nil || res == nil || res.ProtocolVersion < "2026-07-28" {
		return params
	}
	p := *params
	p.Meta = mcp.Meta{}
	for k, v := range params.Meta {
		p.Meta[k] = v
	}
	p.Meta[mcp.MetaKeyLogLevel] = "debug"
	return &p
}

// tagged is the JSON-RPC message data with tag in its params._meta
// (metaCall), and its method, when it is one the gateway relays to a
// call's client; nil otherwise.
func tagged(data []byte, tag string) ([]byte, string) {
	var msg map[string]json.RawMessage
	if json.Unmarshal(data, &msg) != nil {
		return nil, ""
	}
	var method string
	if json.Unmarshal(msg["method"], &method) != nil || !relayed[method] {
		return nil, ""
	}
	var params map[string]json.RawMessage
	if p, ok := msg["params"]; ok && json.Unmarshal(p, &params) != nil {
		return nil, ""
	}
	if params == nil {
		params = map[string]json.RawMessage{}
	}
	var meta map[string]json.RawMessage
	if m, ok := params["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return nil, ""
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[metaCall], _ = json.Marshal(tag)
	params["_meta"], _ = json.Marshal(meta)
	msg["params"], _ = json.Marshal(params)
	out, err := json.Marshal(msg)
	if err != nil {
		return nil, ""
	}
	return out, method
}
