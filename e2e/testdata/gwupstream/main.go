// Command gwupstream is a tiny MCP server over stdio written for idem
// gateway's tests (e2e/): its tool grow adds a tool named extra_N, which
// makes the SDK send notifications/tools/list_changed (the npm servers
// offer no way to change their tools on demand); its tool record counts
// its effects in a file that every process of it shares, the file
// $GWUPSTREAM_EFFECTS, one line an effect, and recorded reads the count.
// The npm servers are the gateway tests' other upstreams.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "gwupstream", Version: "1"}, nil)
	var n atomic.Int64
	empty := json.RawMessage(`{"type":"object"}`)
	srv.AddTool(&mcp.Tool{Name: "grow", Description: "Add a tool.", InputSchema: empty},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := fmt.Sprintf("extra_%d", n.Add(1))
			srv.AddTool(&mcp.Tool{Name: name, Description: "An added tool.", InputSchema: empty,
				Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
				})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "added " + name}}}, nil
		})
	effects := os.Getenv("GWUPSTREAM_EFFECTS")
	srv.AddTool(&mcp.Tool{Name: "record", Description: "Record a note: one effect, one line of the effects file.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"note":{"type":"string"}},"required":["note"]}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Note string }
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return nil, err
			}
			time.Sleep(200 * time.Millisecond) // a call in flight for a while
			f, err := os.OpenFile(effects, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			if _, err := fmt.Fprintf(f, "%s\n", args.Note); err != nil {
				return nil, err
			}
			// Another run of the call would answer other words.
			text := fmt.Sprintf("recorded %q by process %d at %d", args.Note, os.Getpid(), time.Now().UnixNano())
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "recorded", Description: "Count the notes recorded.", InputSchema: empty,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			raw, err := os.ReadFile(effects)
			if err != nil && !os.IsNotExist(err) {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(strings.Count(string(raw), "\n"))}}}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
