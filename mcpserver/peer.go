package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Peer is the MCP client of one tool call: what it declared, and the
// requests and notifications idem gateway relays to it from an upstream
// (sampling, elicitation, logging). Each is sent under the call's own
// context, so that the SDK sends it on the call's stream, and ends when
// the call does.
type Peer struct {
	session *mcp.ServerSession
	call    context.Context
}

type peerKey struct{}

// PeerFrom returns the Peer of the MCP tool call ctx belongs to; none for
// a call that did not come over MCP.
func PeerFrom(ctx context.Context) (*Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(*Peer)
	return p, ok
}

// withPeer gives ctx the Peer of req.
func withPeer(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if req.Session == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, &Peer{session: req.Session, call: ctx})
}

// Sampling says whether the client declared sampling.
func (p *Peer) Sampling() bool {
	c := p.capabilities()
	return c != nil && c.Sampling != nil
}

// Elicitation says whether the client declared elicitation.
func (p *Peer) Elicitation() bool {
	c := p.capabilities()
	return c != nil && c.Elicitation != nil
}

func (p *Peer) capabilities() *mcp.ClientCapabilities {
	if ip := p.session.InitializeParams(); ip != nil {
		return ip.Capabilities
	}
	return nil
}

// CreateMessage sends sampling/createMessage to the client; it ends with
// ctx or with the call.
func (p *Peer) CreateMessage(ctx context.Context, params *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	ctx, stop := p.bound(ctx)
	defer stop()
	return p.session.CreateMessage(ctx, params)
}

// Elicit sends elicitation/create to the client; it ends with ctx or with
// the call.
func (p *Peer) Elicit(ctx context.Context, params *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	ctx, stop := p.bound(ctx)
	defer stop()
	return p.session.Elicit(ctx, params)
}

// Log sends notifications/message to the client, at or above the level
// it set (logging/setLevel; nothing before it sets one).
func (p *Peer) Log(params *mcp.LoggingMessageParams) error {
	return p.session.Log(p.call, params)
}

// bound is the call's context, ended with ctx too.
func (p *Peer) bound(ctx context.Context) (context.Context, func()) {
	out, cancel := context.WithCancelCause(p.call)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return out, func() {
		stop()
		cancel(nil)
	}
}
