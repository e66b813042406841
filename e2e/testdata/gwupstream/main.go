// Command gwupstream is a tiny MCP server over stdio for idem gateway's
// list_changed test (e2e/gateway_test.go): its tool grow adds a tool
// named extra_N, which makes the SDK send notifications/tools/list_changed.
// It is the one upstream of the gateway tests that this project wrote; the
// others are npm's.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"sync/atomic"

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
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
