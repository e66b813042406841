package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Progress tells a tool call's MCP client how far the call has come
// (notifications/progress with the call's progressToken).
type Progress func(ctx context.Context, progress, total float64, message string)

type progressKey struct{}

// ProgressFrom returns the Progress of the tool call ctx belongs to, when
// its client asked for progress (a progressToken in the call's _meta).
// idem gateway passes the upstream's progress on with it.
func ProgressFrom(ctx context.Context) (Progress, bool) {
	p, ok := ctx.Value(progressKey{}).(Progress)
	return p, ok
}

// withProgress gives ctx the Progress of req when its client asked for it.
func withProgress(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return ctx
	}
	session, call := req.Session, ctx
	// Sent under the call's own context, so that the SDK sends it on the
	// call's stream (not the session's standalone one, which a client
	// need not have open).
	return context.WithValue(ctx, progressKey{}, Progress(func(_ context.Context, progress, total float64, message string) {
		_ = session.NotifyProgress(call, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: progress, Total: total, Message: message})
	}))
}

// ListRelay is a Forwarder that passes on its upstream's
// notifications/resources/list_changed and prompts/list_changed: New
// hands it a function that tells every session, given the method.
type ListRelay interface {
	RelayListChanged(func(method string))
}

// listChanged sends srv's sessions the list_changed notification of
// method. go-sdk v1.8.0 sends it only when a resource or prompt of the
// server itself is added or removed (and debounces: one notification for
// changes within 10 ms), so one is added and removed at once. Neither is
// ever seen: the forwarding middleware answers every list, read and get.
func listChanged(srv *mcp.Server, method string) {
	switch method {
	case "notifications/resources/list_changed":
		const uri = "idem:list-changed"
		srv.AddResource(&mcp.Resource{URI: uri, Name: "list-changed"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return nil, mcp.ResourceNotFoundError(uri)
		})
		srv.RemoveResources(uri)
	case "notifications/prompts/list_changed":
		const name = "idem.list-changed"
		srv.AddPrompt(&mcp.Prompt{Name: name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return nil, fmt.Errorf("no prompt %s", name)
		})
		srv.RemovePrompts(name)
	}
}

// UpdateRelay is a Forwarder that passes on its upstream's
// notifications/resources/updated: New hands it the server's
// ResourceUpdated, which tells the sessions subscribed to the resource.
type UpdateRelay interface {
	RelayUpdates(func(context.Context, *mcp.ResourceUpdatedNotificationParams) error)
}
