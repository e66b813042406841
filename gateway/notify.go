package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/mcpserver"
)

// relay passes the upstream's notifications on to idem's MCP server: the
// progress of the tool calls that asked for it, and resources/updated of
// the resources its clients subscribed to; and (peers.go) what the
// upstream sends a tool call's client.
type relay struct {
	mu       sync.Mutex
	next     uint64
	progress map[string]mcpserver.Progress
	updated  func(context.Context, *mcp.ResourceUpdatedNotificationParams) error
	calls    map[string]*inflight // the tool calls in flight, by tag (peers.go)
	listed   func(method string)  // resources/prompts list_changed (Forwarder)
}

// relayTo sets the client's handlers of the notifications u relays.
func (u *Upstream) relayTo(opts *mcp.ClientOptions) {
	opts.ProgressNotificationHandler = func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
		token, ok := req.Params.ProgressToken.(string)
		if !ok {
			return
		}
		u.relay.mu.Lock()
		p := u.relay.progress[token]
		u.relay.mu.Unlock()
		if p != nil {
			p(ctx, req.Params.Progress, req.Params.Total, req.Params.Message)
		}
		if call := u.callByProgress(token); call != nil {
			call.noted()
		}
	}
	listed := func(method string) {
		u.relay.mu.Lock()
		f := u.relay.listed
		u.relay.mu.Unlock()
		if f != nil {
			f(method)
		}
		if u.cfg.OnListChanged != nil {
			u.cfg.OnListChanged(method)
		}
	}
	opts.ResourceListChangedHandler = func(context.Context, *mcp.ResourceListChangedRequest) {
		listed("notifications/resources/list_changed")
	}
	opts.PromptListChangedHandler = func(context.Context, *mcp.PromptListChangedRequest) {
		listed("notifications/prompts/list_changed")
	}
	opts.ResourceUpdatedHandler = func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		u.relay.mu.Lock()
		f := u.relay.updated
		u.relay.mu.Unlock()
		if f != nil {
			_ = f(ctx, req.Params)
		}
	}
}

// watchProgress gives a call's progress to p: the token to send as the
// call's _meta.progressToken, and stop, to call when the call ends. The
// token is the gateway's own, so that callers' tokens never meet upstream.
func (u *Upstream) watchProgress(p mcpserver.Progress) (token string, stop func()) {
	u.relay.mu.Lock()
	defer u.relay.mu.Unlock()
	u.relay.next++
	token = fmt.Sprintf("idem-progress-%d", u.relay.next)
	if u.relay.progress == nil {
		u.relay.progress = map[string]mcpserver.Progress{}
	}
	u.relay.progress[token] = p
	return token, func() {
		u.relay.mu.Lock()
		delete(u.relay.progress, token)
		u.relay.mu.Unlock()
	}
}

// RelayUpdates implements mcpserver.UpdateRelay.
func (f *forwarder) RelayUpdates(notify func(context.Context, *mcp.ResourceUpdatedNotificationParams) error) {
	f.u.relay.mu.Lock()
	f.u.relay.updated = notify
	f.u.relay.mu.Unlock()
}

// RelayListChanged implements mcpserver.ListRelay.
func (f *forwarder) RelayListChanged(notify func(method string)) {
	f.u.relay.mu.Lock()
	f.u.relay.listed = notify
	f.u.relay.mu.Unlock()
}

// progressWatcher is a Caller that relays progress (Upstream).
type progressWatcher interface {
	watchProgress(mcpserver.Progress) (string, func())
}
