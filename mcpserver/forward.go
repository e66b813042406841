package mcpserver

import (
	"context"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Forwarder serves the MCP methods idem does not run itself, reads all of
// them, from the server it fronts (idem gateway, SPEC §17): resources,
// resource templates, subscriptions, prompts and completions. The gateway
// implements it per upstream; one over many upstreams merges theirs.
// Idempotency applies to tool calls only: these go through no pipeline,
// and each is logged as a read (Options.Logger, "mcp read").
type Forwarder interface {
	ListResources(context.Context, *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error)
	ListResourceTemplates(context.Context, *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error)
	ReadResource(context.Context, *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error)
	Subscribe(context.Context, *mcp.SubscribeParams) error
	Unsubscribe(context.Context, *mcp.UnsubscribeParams) error
	ListPrompts(context.Context, *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error)
	GetPrompt(context.Context, *mcp.GetPromptParams) (*mcp.GetPromptResult, error)
	Complete(context.Context, *mcp.CompleteParams) (*mcp.CompleteResult, error)
}

// forwarding sets opts up to serve f: the capabilities (resources with
// subscribe, prompts, completions, and logging as the SDK's default has
// it; listChanged for resources and prompts when f relays them),
// the subscribe and completion handlers, and a receiving middleware that
// answers the list, read and get methods.
func forwarding(f Forwarder, opts *mcp.ServerOptions, log *slog.Logger) mcp.Middleware {
	_, relays := f.(UpdateRelay)
	_, lists := f.(ListRelay)
	opts.Capabilities = &mcp.ServerCapabilities{
		Logging:     &mcp.LoggingCapabilities{},
		Resources:   &mcp.ResourceCapabilities{Subscribe: relays, ListChanged: lists},
		Prompts:     &mcp.PromptCapabilities{ListChanged: lists},
		Completions: &mcp.CompletionCapabilities{},
	}
	opts.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error {
		read(log, req, "resources/subscribe", "uri", req.Params.URI)
		return f.Subscribe(ctx, req.Params)
	}
	opts.UnsubscribeHandler = func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
		return f.Unsubscribe(ctx, req.Params)
	}
	opts.CompletionHandler = func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
		read(log, req, "completion/complete")
		return f.Complete(ctx, req.Params)
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch r := req.(type) {
			case *mcp.ListResourcesRequest:
				read(log, req, method)
				return f.ListResources(ctx, orEmpty(r.Params))
			case *mcp.ListResourceTemplatesRequest:
				read(log, req, method)
				return f.ListResourceTemplates(ctx, orEmpty(r.Params))
			case *mcp.ReadResourceRequest:
				read(log, req, method, "uri", r.Params.URI)
				return f.ReadResource(ctx, r.Params)
			case *mcp.ListPromptsRequest:
				read(log, req, method)
				return f.ListPrompts(ctx, orEmpty(r.Params))
			case *mcp.GetPromptRequest:
				read(log, req, method, "prompt", r.Params.Name)
				return f.GetPrompt(ctx, r.Params)
			}
			return next(ctx, method, req)
		}
	}
}

// orEmpty is p, or a new zero value for a request without params.
func orEmpty[P any](p *P) *P {
	if p == nil {
		return new(P)
	}
	return p
}

// read logs one forwarded read with the caller's principal.
func read(log *slog.Logger, req mcp.Request, method string, attrs ...any) {
	if log == nil {
		return
	}
	who := ""
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		if c, ok := extra.TokenInfo.Extra[callerExtra].(*caller); ok {
			who = c.principal.Org + "/" + c.principal.ID
		}
	}
	log.Info("mcp read", append([]any{"method", method, "principal", who}, attrs...)...)
}
