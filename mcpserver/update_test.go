package mcpserver_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/mcpserver"
)

// listedBackend lists the tools it holds; calls are not made here.
type listedBackend struct {
	mu    sync.Mutex
	tools []mcpserver.Tool
}

func (b *listedBackend) Descriptors(context.Context) ([]mcpserver.Tool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]mcpserver.Tool(nil), b.tools...), nil
}

func (b *listedBackend) Call(context.Context, string, map[string]json.RawMessage, string, bool) (idem.Result, error) {
	return idem.Result{}, idem.Errorf(idem.CodeInternal, "not called here")
}

func (b *listedBackend) set(tools ...mcpserver.Tool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tools = tools
}

func listedTool(name, summary string) mcpserver.Tool {
	return mcpserver.Tool{
		Name: name, Method: "GET", Path: "/v1/" + name, Summary: summary, SideEffect: idem.SideEffectRead,
		Retry:    idem.RetryContract{Kind: idem.RetryFreshRead, Rationale: "r"},
		Surfaces: []idem.Surface{idem.SurfaceMCP}, InputSchema: json.RawMessage(`{"type":"object"}`),
	}
}

// Update tells connected clients of a change (notifications/tools/
// list_changed) and of nothing when nothing changed (issue 26, item 4: a
// reload every two seconds sent one each time).
func TestUpdateNotifiesOnlyOnChange(t *testing.T) {
	b := &listedBackend{}
	b.set(listedTool("thing.show", "Show a thing"), listedTool("thing.list", "List things"))
	srv, err := mcpserver.New(t.Context(), b, mcpserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	published, err := mcpserver.PublishedOf(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := client.Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// Unchanged, three times: no notification within 30 times the SDK's
	// debounce of a notification (10 ms).
	for range 3 {
		if published, err = mcpserver.Update(t.Context(), srv, b, published); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-changed:
		t.Fatal("an update that changed nothing told the client tools/list_changed")
	case <-time.After(300 * time.Millisecond):
	}

	// A changed description, a removed tool: one notification, and the
	// client lists the new tools.
	b.set(listedTool("thing.show", "Show one thing"))
	if published, err = mcpserver.Update(t.Context(), srv, b, published); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a changed tool list was not announced")
	}
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 || list.Tools[0].Name != "thing.show" || len(published) != 1 {
		t.Fatalf("tools after the change: %+v (published %v)", list.Tools, published)
	}
}
