package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGatewayEverythingResourcesAndPrompts (issue 34 build item 4): idem
// gateway in front of npm's server-everything (stdio) serves its prompts
// and resources to the go-sdk client: list and get a prompt, complete its
// argument, read a listed resource, and read a link one of its tools
// returns.
func TestGatewayEverythingResourcesAndPrompts(t *testing.T) {
	dir := gatewayDir(t)
	g := startGateway(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), nil, "--upstream-command", "node "+everythingServer(t)+" stdio")
	progress := make(chan float64, 100)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "e2e-progress" {
				progress <- req.Params.Progress
			}
		},
	}).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{gatewayToken}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	ctx := t.Context()

	prompts := promptNames(t, cs)
	if len(prompts) < 4 || !strings.Contains(strings.Join(prompts, " "), "simple-prompt") {
		t.Fatalf("prompts %v, want server-everything's (simple-prompt among them)", prompts)
	}
	got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "simple-prompt"})
	if err != nil || len(got.Messages) != 1 || !strings.Contains(got.Messages[0].Content.(*mcp.TextContent).Text, "simple prompt") {
		t.Fatalf("prompts/get simple-prompt: %v %+v", err, got)
	}

	done, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "completable-prompt"},
		Argument: mcp.CompleteParamsArgument{Name: "department", Value: "S"}})
	if err != nil || strings.Join(done.Completion.Values, " ") != "Sales Support" {
		t.Fatalf("completion/complete: %v %+v", err, done)
	}

	readFirstResource(t, cs)

	res := mcpCall(t, cs, &mcp.CallToolParams{Name: "get-resource-links", Arguments: map[string]any{"count": 1}})
	var link *mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	if res.IsError || link == nil {
		t.Fatalf("get-resource-links: %s", resultJSON(res))
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(read.Contents) == 0 || read.Contents[0].URI != link.URI || read.Contents[0].Text == "" && len(read.Contents[0].Blob) == 0 {
		t.Fatalf("resources/read %s (a tool's link): %v %+v", link.URI, err, read)
	}

	// The upstream's progress reaches the caller that asked for it: the
	// operation sends one notification a step, a second apart, before its
	// result (a last one racing the result may be dropped).
	p := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 3, "steps": 3, "idempotencyKey": "e2e-long"}}
	p.SetProgressToken("e2e-progress")
	if res := mcpCall(t, cs, p); res.IsError {
		t.Fatalf("trigger-long-running-operation: %s", resultJSON(res))
	}
	if len(progress) < 2 {
		t.Fatalf("%d progress notifications reached the client, want the steps before the last", len(progress))
	}
}

// idemProblem is the problem object of an error idem answered: in
// structuredContent, or in _meta "io.idem/problem" for a tool that
// declares an outputSchema (server-memory's do).
func idemProblem(res *mcp.CallToolResult) any {
	if p, ok := res.Meta["io.idem/problem"]; ok {
		return p
	}
	return res.StructuredContent
}

// promptNames lists every prompt cs is served, all pages.
func promptNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for p, err := range cs.Prompts(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	return names
}

// readFirstResource lists the resources cs is served and reads the first:
// its contents must come back under its URI.
func readFirstResource(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	var first *mcp.Resource
	for r, err := range cs.Resources(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = r
		}
	}
	if first == nil {
		t.Fatal("resources/list is empty")
	}
	read, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: first.URI})
	if err != nil || len(read.Contents) == 0 || read.Contents[0].URI != first.URI {
		t.Fatalf("resources/read %s: %v %+v", first.URI, err, read)
	}
}
