package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Merge is one Forwarder over several (the upstreams of one gateway, in
// order). A list is every one's in turn, page by page: its cursor names
// the forwarder and that forwarder's own cursor; a forwarder that fails
// to list is left out, unless all do. A read, a prompt, a subscription or
// a completion goes to each in turn until one answers: these are reads,
// and each forwarder refuses what is not its own (a prompt outside its
// namespace, a URI it does not know). So prompt names must be namespaced
// (gateway.Upstream.Forwarder with a name) for two upstreams to share a
// prompt name; resource URIs go to the first upstream that can read them.
func Merge(fs ...Forwarder) Forwarder {
	if len(fs) == 1 {
		return fs[0]
	}
	return merged(fs)
}

type merged []Forwarder

// mergedCursor is the cursor of a merged list: the forwarder and its own.
type mergedCursor struct {
	I int    `json:"i"`
	C string `json:"c,omitempty"`
}

func encodeCursor(i int, c string) string {
	b, _ := json.Marshal(mergedCursor{i, c})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, n int) (mergedCursor, error) {
	if s == "" {
		return mergedCursor{}, nil
	}
	var c mergedCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.I < 0 || c.I >= n {
		return mergedCursor{}, errors.New("invalid cursor: send the nextCursor of the previous page, or none")
	}
	return c, nil
}

// list is one page of a merged list: the page of the forwarder the cursor
// names, or of the next one that answers. call is the Forwarder's
// method; cursor and next point at the params' cursor and the result's.
func list[P, R any](ctx context.Context, m merged, p *P, call func(Forwarder, context.Context, *P) (*R, error),
	cursor func(*P) *string, next func(*R) *string) (*R, error) {
	c, err := decodeCursor(*cursor(p), len(m))
	if err != nil {
		return nil, err
	}
	var first error
	for i := c.I; i < len(m); i, c.C = i+1, "" {
		q := *p
		*cursor(&q) = c.C
		res, err := call(m[i], ctx, &q)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		switch n := next(res); {
		case *n != "":
			*n = encodeCursor(i, *n)
		case i+1 < len(m):
			*n = encodeCursor(i+1, "")
		}
		return res, nil
	}
	return nil, first
}

// each asks each forwarder in turn; the first answer wins, else the first
// error.
func each[R any](m merged, do func(Forwarder) (R, error)) (R, error) {
	var first error
	for _, f := range m {
		res, err := do(f)
		if err == nil {
			return res, nil
		}
		if first == nil {
			first = err
		}
	}
	var zero R
	return zero, first
}

func (m merged) ListResources(ctx context.Context, p *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return list(ctx, m, p, Forwarder.ListResources,
		func(p *mcp.ListResourcesParams) *string { return &p.Cursor }, func(r *mcp.ListResourcesResult) *string { return &r.NextCursor })
}

func (m merged) ListResourceTemplates(ctx context.Context, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return list(ctx, m, p, Forwarder.ListResourceTemplates,
		func(p *mcp.ListResourceTemplatesParams) *string { return &p.Cursor }, func(r *mcp.ListResourceTemplatesResult) *string { return &r.NextCursor })
}

func (m merged) ListPrompts(ctx context.Context, p *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	return list(ctx, m, p, Forwarder.ListPrompts,
		func(p *mcp.ListPromptsParams) *string { return &p.Cursor }, func(r *mcp.ListPromptsResult) *string { return &r.NextCursor })
}

func (m merged) ReadResource(ctx context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return each(m, func(f Forwarder) (*mcp.ReadResourceResult, error) { return f.ReadResource(ctx, p) })
}

func (m merged) GetPrompt(ctx context.Context, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	return each(m, func(f Forwarder) (*mcp.GetPromptResult, error) { return f.GetPrompt(ctx, p) })
}

func (m merged) Complete(ctx context.Context, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return each(m, func(f Forwarder) (*mcp.CompleteResult, error) { return f.Complete(ctx, p) })
}

func (m merged) Subscribe(ctx context.Context, p *mcp.SubscribeParams) error {
	_, err := each(m, func(f Forwarder) (struct{}, error) { return struct{}{}, f.Subscribe(ctx, p) })
	return err
}

func (m merged) Unsubscribe(ctx context.Context, p *mcp.UnsubscribeParams) error {
	_, err := each(m, func(f Forwarder) (struct{}, error) { return struct{}{}, f.Unsubscribe(ctx, p) })
	return err
}

// RelayListChanged implements ListRelay for the forwarders that relay.
func (m merged) RelayListChanged(notify func(method string)) {
	for _, f := range m {
		if r, ok := f.(ListRelay); ok {
			r.RelayListChanged(notify)
		}
	}
}

// RelayUpdates implements UpdateRelay for the forwarders that relay.
func (m merged) RelayUpdates(notify func(context.Context, *mcp.ResourceUpdatedNotificationParams) error) {
	for _, f := range m {
		if r, ok := f.(UpdateRelay); ok {
			r.RelayUpdates(notify)
		}
	}
}
