package gateway

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/mcpserver"
)

// Forwarder is the mcpserver.Forwarder of the whole set: the resources,
// prompts and completions of every MCP upstream that is up, merged
// (mcpserver.Merge) in the order of the upstreams' names, read anew at
// each request so that upstreams added, removed or reconnected by a
// reload are served at once. An upstream's prompts are named
// "<upstream>.<prompt>" unless its config says prefix: false.
func (s *Set) Forwarder() mcpserver.Forwarder { return &setForwarder{s: s} }

type setForwarder struct {
	s *Set

	mu     sync.Mutex
	notify func(context.Context, *mcp.ResourceUpdatedNotificationParams) error
	// byUpstream keeps each upstream's forwarder (its subscriptions) for
	// as long as that upstream's session object lives.
	byUpstream map[*Upstream]mcpserver.Forwarder
}

var _ mcpserver.UpdateRelay = (*setForwarder)(nil)

// current merges the forwarders of the MCP upstreams up now.
func (f *setForwarder) current() mcpserver.Forwarder {
	ups := f.s.Upstreams()
	names := slices.Sorted(maps.Keys(ups))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byUpstream == nil {
		f.byUpstream = map[*Upstream]mcpserver.Forwarder{}
	}
	live := map[*Upstream]bool{}
	var fs []mcpserver.Forwarder
	for _, name := range names {
		up := ups[name]
		live[up] = true
		fw, ok := f.byUpstream[up]
		if !ok {
			prefix := name
			if m := f.s.member(name); m != nil && !m.cfg.Prefix {
				prefix = ""
			}
			fw = up.Forwarder(prefix)
			if r, ok := fw.(mcpserver.UpdateRelay); ok && f.notify != nil {
				r.RelayUpdates(f.notify)
			}
			f.byUpstream[up] = fw
		}
		fs = append(fs, fw)
	}
	for up := range f.byUpstream {
		if !live[up] {
			delete(f.byUpstream, up)
		}
	}
	if len(fs) == 0 {
		return none{}
	}
	return mcpserver.Merge(fs...)
}

// member is the committed member named name, or nil.
func (s *Set) member(name string) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[name]
}

// none is the forwarder of a set with no MCP upstream up: empty lists,
// and nothing to read.
type none struct{}

var errNoUpstream = errors.New("no MCP upstream of this gateway is up: try again once /readyz lists one as up")

func (none) ListResources(context.Context, *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}, nil
}

func (none) ListResourceTemplates(context.Context, *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}, nil
}

func (none) ListPrompts(context.Context, *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	return &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}, nil
}

func (none) ReadResource(context.Context, *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return nil, errNoUpstream
}

func (none) GetPrompt(context.Context, *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	return nil, errNoUpstream
}

func (none) Complete(context.Context, *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return nil, errNoUpstream
}

func (none) Subscribe(context.Context, *mcp.SubscribeParams) error     { return errNoUpstream }
func (none) Unsubscribe(context.Context, *mcp.UnsubscribeParams) error { return nil }

// RelayListChanged implements mcpserver.ListRelay: every MCP upstream's
// resources and prompts list_changed goes to notify.
func (f *setForwarder) RelayListChanged(notify func(method string)) {
	f.s.mu.Lock()
	f.s.listed = notify
	f.s.mu.Unlock()
}

// RelayUpdates implements mcpserver.UpdateRelay: every upstream's
// resources/updated goes to notify.
func (f *setForwarder) RelayUpdates(notify func(context.Context, *mcp.ResourceUpdatedNotificationParams) error) {
	f.mu.Lock()
	f.notify = notify
	for _, fw := range f.byUpstream {
		if r, ok := fw.(mcpserver.UpdateRelay); ok {
			r.RelayUpdates(notify)
		}
	}
	f.mu.Unlock()
}

func (f *setForwarder) ListResources(ctx context.Context, p *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return f.current().ListResources(ctx, p)
}

func (f *setForwarder) ListResourceTemplates(ctx context.Context, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return f.current().ListResourceTemplates(ctx, p)
}

func (f *setForwarder) ReadResource(ctx context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return f.current().ReadResource(ctx, p)
}

func (f *setForwarder) Subscribe(ctx context.Context, p *mcp.SubscribeParams) error {
	return f.current().Subscribe(ctx, p)
}

func (f *setForwarder) Unsubscribe(ctx context.Context, p *mcp.UnsubscribeParams) error {
	return f.current().Unsubscribe(ctx, p)
}

func (f *setForwarder) ListPrompts(ctx context.Context, p *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	return f.current().ListPrompts(ctx, p)
}

func (f *setForwarder) GetPrompt(ctx context.Context, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	return f.current().GetPrompt(ctx, p)
}

func (f *setForwarder) Complete(ctx context.Context, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return f.current().Complete(ctx, p)
}
