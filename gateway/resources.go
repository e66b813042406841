package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/mcpserver"
)

// Forwarder is the mcpserver.Forwarder of the upstream: its resources
// (URIs kept), resource templates, subscriptions, prompts and completions,
// forwarded as they are (SPEC §17.1). With a name, its prompts are served
// as "<name>.<prompt>" (and a completion's prompt reference is read so);
// without one (the one-upstream form) names are kept. These are reads: a
// lost session is made again and the request sent once more.
func (u *Upstream) Forwarder(name string) mcpserver.Forwarder {
	return &forwarder{u: u, name: name}
}

type forwarder struct {
	u    *Upstream
	name string
}

// subscriptions counts the downstream subscriptions of each URI: the
// upstream is subscribed by the first and unsubscribed by the last, so
// that one client's unsubscribe does not end another's updates. They are
// the Upstream's, not a session's: a new session is subscribed to every
// URI still held (resubscribe). mu is held across the upstream request.
type subscriptions struct {
	mu    sync.Mutex
	count map[string]int
}

// held reports whether a client holds a subscription.
func (s *subscriptions) held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.count) > 0
}

// resubscribe subscribes cs, a new session, to every URI the gateway's
// clients still hold: the upstream that forgot the last session (it
// restarted, or a spawned one was spawned anew) forgot its subscriptions
// with it.
func (u *Upstream) resubscribe(cs *mcp.ClientSession) {
	u.subs.mu.Lock()
	defer u.subs.mu.Unlock()
	for uri := range u.subs.count {
		ctx, cancel := context.WithTimeout(context.Background(), u.cfg.ConnectTimeout)
		err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		cancel()
		if err != nil {
			u.log.Warn("a new upstream session could not be subscribed to a resource its clients hold: they get no resources/updated of it until they subscribe again",
				"upstream", u.Describe(), "uri", uri, "error", err.Error())
		}
	}
}

// session runs do with the upstream's session: once more with a new
// session when the upstream lost the first, and once more, on a new
// connection, when the HTTP exchange broke (a connection the upstream
// closed, as a restarted one does to those kept before): these are reads.
func session[R any](ctx context.Context, u *Upstream, what string, do func(*mcp.ClientSession) (R, error)) (R, error) {
	var zero R
	renewed, resent := false, false
	for {
		cs, err := u.current(ctx)
		if err != nil {
			return zero, err
		}
		out, err := do(cs)
		if err == nil {
			return out, nil
		}
		var broken *url.Error
		switch {
		case ctx.Err() != nil:
		case !renewed && (errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed)):
			renewed = true
			u.drop(cs)
			continue
		case !resent && errors.As(err, &broken):
			resent = true
			if u.cfg.URL != "" {
				// The upstream's other idle connections were most likely
				// closed with this one (Call does the same).
				u.httpTransport().(*http.Transport).CloseIdleConnections()
			}
			continue
		}
		return zero, fmt.Errorf("%s on the upstream %s: %w", what, u.Describe(), err)
	}
}

// declared is the capabilities the upstream declared on cs; nil when
// the session holds no initialize result (nothing is known: ask).
func declared(cs *mcp.ClientSession) *mcp.ServerCapabilities {
	if r := cs.InitializeResult(); r != nil && r.Capabilities != nil {
		return r.Capabilities
	}
	return nil
}

// The gateway declares resources and prompts whatever its upstreams offer,
// so a list of what an upstream did not declare is empty rather than the
// upstream's "method not found" (server-memory offers no prompts).

func (f *forwarder) ListResources(ctx context.Context, p *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return session(ctx, f.u, "resources/list", func(cs *mcp.ClientSession) (*mcp.ListResourcesResult, error) {
		if c := declared(cs); c != nil && c.Resources == nil {
			return &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}, nil
		}
		return cs.ListResources(ctx, p)
	})
}

func (f *forwarder) ListResourceTemplates(ctx context.Context, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return session(ctx, f.u, "resources/templates/list", func(cs *mcp.ClientSession) (*mcp.ListResourceTemplatesResult, error) {
		if c := declared(cs); c != nil && c.Resources == nil {
			return &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}, nil
		}
		return cs.ListResourceTemplates(ctx, p)
	})
}

func (f *forwarder) ReadResource(ctx context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return session(ctx, f.u, "resources/read", func(cs *mcp.ClientSession) (*mcp.ReadResourceResult, error) {
		return cs.ReadResource(ctx, p)
	})
}

func (f *forwarder) Subscribe(ctx context.Context, p *mcp.SubscribeParams) error {
	s := &f.u.subs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count[p.URI] == 0 {
		_, err := session(ctx, f.u, "resources/subscribe", func(cs *mcp.ClientSession) (struct{}, error) {
			return struct{}{}, cs.Subscribe(ctx, p)
		})
		if err != nil {
			return err
		}
	}
	if s.count == nil {
		s.count = map[string]int{}
	}
	s.count[p.URI]++
	return nil
}

func (f *forwarder) Unsubscribe(ctx context.Context, p *mcp.UnsubscribeParams) error {
	s := &f.u.subs
	s.mu.Lock()
	defer s.mu.Unlock()
	switch n := s.count[p.URI]; {
	case n == 0:
		return nil // not subscribed through the gateway
	case n > 1:
		s.count[p.URI]--
		return nil
	}
	_, err := session(ctx, f.u, "resources/unsubscribe", func(cs *mcp.ClientSession) (struct{}, error) {
		return struct{}{}, cs.Unsubscribe(ctx, p)
	})
	if err == nil {
		delete(s.count, p.URI)
	}
	return err
}

func (f *forwarder) ListPrompts(ctx context.Context, p *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	res, err := session(ctx, f.u, "prompts/list", func(cs *mcp.ClientSession) (*mcp.ListPromptsResult, error) {
		if c := declared(cs); c != nil && c.Prompts == nil {
			return &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}, nil
		}
		return cs.ListPrompts(ctx, p)
	})
	if err != nil || f.name == "" {
		return res, err
	}
	out := *res
	out.Prompts = make([]*mcp.Prompt, 0, len(res.Prompts))
	for _, pr := range res.Prompts {
		if pr == nil {
			continue
		}
		c := *pr
		c.Name = f.name + "." + pr.Name
		out.Prompts = append(out.Prompts, &c)
	}
	return &out, nil
}

func (f *forwarder) GetPrompt(ctx context.Context, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	name, err := f.upstreamPrompt(p.Name)
	if err != nil {
		return nil, err
	}
	q := *p
	q.Name = name
	return session(ctx, f.u, "prompts/get", func(cs *mcp.ClientSession) (*mcp.GetPromptResult, error) {
		return cs.GetPrompt(ctx, &q)
	})
}

func (f *forwarder) Complete(ctx context.Context, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	q := *p
	if p.Ref != nil && p.Ref.Type == "ref/prompt" {
		name, err := f.upstreamPrompt(p.Ref.Name)
		if err != nil {
			return nil, err
		}
		ref := *p.Ref
		ref.Name = name
		q.Ref = &ref
	}
	return session(ctx, f.u, "completion/complete", func(cs *mcp.ClientSession) (*mcp.CompleteResult, error) {
		return cs.Complete(ctx, &q)
	})
}

// upstreamPrompt is the upstream's name of a served prompt name.
func (f *forwarder) upstreamPrompt(served string) (string, error) {
	if f.name == "" {
		return served, nil
	}
	name, ok := strings.CutPrefix(served, f.name+".")
	if !ok || name == "" {
		return "", fmt.Errorf("no prompt named %q: this gateway's prompts are named %s.<prompt> (prompts/list)", served, f.name)
	}
	return name, nil
}
