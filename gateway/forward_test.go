package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/mcpserver"
)

// library is an upstream with resources, a template, prompts and
// completions, beside a tool that returns a resource link.
type library struct {
	srv        *mcp.Server
	url        string
	subscribed atomic.Value // the URI of the last resources/subscribe
	// subscribes and unsubscribes count what reached the upstream.
	subscribes, unsubscribes atomic.Int64
	// ack lets count go on after each progress notification.
	ack chan struct{}
}

func newLibrary(t *testing.T) *library { return newLibraryAt(t, "127.0.0.1:0") }

// newLibraryAt is newLibrary listening on addr.
func newLibraryAt(t *testing.T, addr string) *library {
	t.Helper()
	l := &library{ack: make(chan struct{})}
	srv := mcp.NewServer(&mcp.Implementation{Name: "library", Version: "1"}, &mcp.ServerOptions{
		PageSize: 1, // every list has pages: the cursor must pass through
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			if req.Params.Ref.Type != "ref/prompt" || req.Params.Ref.Name != "greet" {
				return nil, &jsonrpcError{"unknown reference " + req.Params.Ref.Name}
			}
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{req.Params.Argument.Value + "lice"}}}, nil
		},
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			l.subscribed.Store(req.Params.URI)
			l.subscribes.Add(1)
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error {
			l.unsubscribes.Add(1)
			return nil
		},
	})
	for _, name := range []string{"a", "b"} {
		uri := "file:///books/" + name + ".txt"
		srv.AddResource(&mcp.Resource{URI: uri, Name: name, MIMEType: "text/plain"},
			func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "book " + name}}}, nil
			})
	}
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "file:///books/{name}.txt", Name: "book"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "templated"}}}, nil
		})
	for _, name := range []string{"greet", "summarize"} {
		srv.AddPrompt(&mcp.Prompt{Name: name, Arguments: []*mcp.PromptArgument{{Name: "name"}}},
			func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: name + " " + req.Params.Arguments["name"]}}}}, nil
			})
	}
	l.srv = srv
	srv.AddTool(&mcp.Tool{Name: "count", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i := 1; i <= 3; i++ {
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: 3, Message: "counted"})
				select {
				case <-l.ack: // the client got it
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "3"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "find", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{URI: "file:///books/b.txt", Name: "b"}}}, nil
		})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	l.url = "http://" + ln.Addr().String() + "/mcp"
	return l
}

type jsonrpcError struct{ msg string }

func (e *jsonrpcError) Error() string { return e.msg }

// forwardingGateway is a gateway in front of l whose /mcp forwards
// resources, prompts and completions, prompts named "<name>.<prompt>"
// when name is set; and an SDK client on it.
func forwardingGateway(t *testing.T, l *library, name string) *mcp.ClientSession {
	return forwardingGatewayWith(t, l, name, nil)
}

func forwardingGatewayWith(t *testing.T, l *library, name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	return mergingGateway(t, []*library{l}, []string{name}, opts)
}

// mergingGateway fronts the libraries, the tools of the first, the
// forwarders of all merged (mcpserver.Merge), each named as names say.
func mergingGateway(t *testing.T, ls []*library, names []string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connect(t, startMerging(t, ls, names), opts)
}

// connect is an SDK client session on the gateway at url.
func connect(t *testing.T, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// startMerging serves the gateway of mergingGateway; its URL.
func startMerging(t *testing.T, ls []*library, names []string) string {
	t.Helper()
	var fs []mcpserver.Forwarder
	var ops []idem.Operation
	for i, l := range ls {
		up := dial(t, gateway.UpstreamConfig{URL: l.url})
		fs = append(fs, up.Forwarder(names[i]))
		if i == 0 {
			ops = build(t, up, nil)
		}
	}
	gw, _ := serveGateway(t, "", ops, mcpserver.Merge(fs...))
	return gw
}

// Issue 34 build item 4: resources (list, templates, read, subscribe),
// prompts (list, get) and completions of the upstream reach the
// downstream client, every page; a link a tool returns can be read.
func TestGatewayForwardsResourcesAndPrompts(t *testing.T) {
	l := newLibrary(t)
	cs := forwardingGateway(t, l, "")
	ctx := t.Context()
	caps := cs.InitializeResult().Capabilities
	if caps.Resources == nil || !caps.Resources.Subscribe || caps.Prompts == nil || caps.Completions == nil || caps.Tools == nil {
		t.Fatalf("capabilities %+v", caps)
	}
	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	if strings.Join(uris, " ") != "file:///books/a.txt file:///books/b.txt" {
		t.Fatalf("resources %v", uris)
	}
	var templates []string
	for rt, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, rt.URITemplate)
	}
	if strings.Join(templates, " ") != "file:///books/{name}.txt" {
		t.Fatalf("templates %v", templates)
	}
	// The link a tool returns is a resource the client can read.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find"})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("find: %v %+v", err, res)
	}
	link, ok := res.Content[0].(*mcp.ResourceLink)
	if !ok {
		t.Fatalf("find's content %T", res.Content[0])
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != "book b" {
		t.Fatalf("read %s: %v %+v", link.URI, err, read)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: link.URI}); err != nil || l.subscribed.Load() != link.URI {
		t.Fatalf("subscribe: %v (the upstream got %v)", err, l.subscribed.Load())
	}
	var prompts []string
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, p.Name)
	}
	if strings.Join(prompts, " ") != "greet summarize" {
		t.Fatalf("prompts %v", prompts)
	}
	got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "Ada"}})
	if err != nil || len(got.Messages) != 1 || got.Messages[0].Content.(*mcp.TextContent).Text != "greet Ada" {
		t.Fatalf("prompts/get: %v %+v", err, got)
	}
	done, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "A"}})
	if err != nil || strings.Join(done.Completion.Values, " ") != "Alice" {
		t.Fatalf("completion/complete: %v %+v", err, done)
	}
}

// SPEC §17.1: with an upstream name, prompts are "<name>.<prompt>" (and
// so are a completion's prompt references); resource URIs are kept.
func TestGatewayNamespacesPrompts(t *testing.T) {
	l := newLibrary(t)
	cs := forwardingGateway(t, l, "lib")
	ctx := t.Context()
	var prompts []string
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, p.Name)
	}
	if strings.Join(prompts, " ") != "lib.greet lib.summarize" {
		t.Fatalf("prompts %v", prompts)
	}
	got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "lib.summarize", Arguments: map[string]string{"name": "x"}})
	if err != nil || got.Messages[0].Content.(*mcp.TextContent).Text != "summarize x" {
		t.Fatalf("prompts/get lib.summarize: %v %+v", err, got)
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize"}); err == nil || !strings.Contains(err.Error(), "lib.<prompt>") {
		t.Fatalf("prompts/get without the prefix: %v", err)
	}
	done, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "lib.greet"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "A"}})
	if err != nil || strings.Join(done.Completion.Values, " ") != "Alice" {
		t.Fatalf("completion/complete: %v %+v", err, done)
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///books/a.txt"})
	if err != nil || read.Contents[0].Text != "book a" {
		t.Fatalf("read: %v %+v", err, read)
	}
}

// The upstream's progress reaches the client of a tool call that asked for
// it, under the client's own token; resources/updated reaches the client
// subscribed to the resource.
func TestGatewayRelaysProgressAndUpdates(t *testing.T) {
	l := newLibrary(t)
	progress := make(chan *mcp.ProgressNotificationParams, 10)
	updated := make(chan string, 10)
	cs := forwardingGatewayWith(t, l, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { progress <- req.Params },
		ResourceUpdatedHandler:      func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	ctx := t.Context()
	p := &mcp.CallToolParams{Name: "count"}
	p.SetProgressToken("mine")
	done := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(ctx, p)
		if err == nil && res.IsError {
			err = fmt.Errorf("count: %+v", res)
		}
		done <- err
	}()
	for i := 1; i <= 3; i++ {
		select {
		case n := <-progress:
			if n.ProgressToken != "mine" || n.Progress != float64(i) || n.Total != 3 {
				t.Fatalf("progress %d: %+v", i, n)
			}
			l.ack <- struct{}{}
		case <-time.After(10 * time.Second):
			t.Fatalf("progress %d never came", i)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !cs.InitializeResult().Capabilities.Resources.Subscribe {
		t.Fatal("no resources.subscribe capability")
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "file:///books/a.txt"}); err != nil {
		t.Fatal(err)
	}
	if err := l.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "file:///books/a.txt"}); err != nil {
		t.Fatal(err)
	}
	select {
	case uri := <-updated:
		if uri != "file:///books/a.txt" {
			t.Fatalf("updated %s", uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("resources/updated never reached the subscribed client")
	}
}

// mcpserver.Merge: two upstreams' prompts, namespaced, listed page by page
// across both and each got from its own; their resources listed in turn.
func TestGatewayMergesUpstreams(t *testing.T) {
	one, two := newLibrary(t), newLibrary(t)
	cs := mergingGateway(t, []*library{one, two}, []string{"one", "two"}, nil)
	ctx := t.Context()
	var prompts []string
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, p.Name)
	}
	if strings.Join(prompts, " ") != "one.greet one.summarize two.greet two.summarize" {
		t.Fatalf("prompts %v", prompts)
	}
	for _, name := range prompts {
		got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"name": "x"}})
		_, bare, _ := strings.Cut(name, ".")
		if err != nil || got.Messages[0].Content.(*mcp.TextContent).Text != bare+" x" {
			t.Fatalf("prompts/get %s: %v %+v", name, err, got)
		}
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "three.greet"}); err == nil {
		t.Fatal("prompts/get of no upstream's prompt answered")
	}
	n := 0
	for _, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("%d resources listed, want both upstreams' two", n)
	}
	if _, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: "bogus"}); err == nil || !strings.Contains(err.Error(), "invalid cursor") {
		t.Fatalf("a bogus cursor: %v", err)
	}
}

// Two clients subscribed to one resource through the gateway: the upstream
// is subscribed once, and one client's unsubscribe leaves the other's
// updates coming.
func TestGatewaySharesASubscription(t *testing.T) {
	l := newLibrary(t)
	url := startMerging(t, []*library{l}, []string{""})
	updated := make(chan string, 10)
	keeps := connect(t, url, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	leaves := connect(t, url, nil)
	ctx := t.Context()
	const uri = "file:///books/a.txt"
	for _, cs := range []*mcp.ClientSession{keeps, leaves} {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	if err := leaves.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if l.subscribes.Load() != 1 || l.unsubscribes.Load() != 0 {
		t.Fatalf("the upstream got %d subscribes and %d unsubscribes, want 1 and 0", l.subscribes.Load(), l.unsubscribes.Load())
	}
	l.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
	select {
	case got := <-updated:
		if got != uri {
			t.Fatalf("updated %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client still subscribed got no resources/updated")
	}
	if err := keeps.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil || l.unsubscribes.Load() != 1 {
		t.Fatalf("the last unsubscribe: %v, the upstream got %d", err, l.unsubscribes.Load())
	}
}

// A forwarded request without its params is refused (a JSON-RPC error,
// or the SDK's 400), and the gateway goes on serving.
func TestGatewayForwardedRequestWithoutParams(t *testing.T) {
	l := newLibrary(t)
	url := startMerging(t, []*library{l}, []string{""})
	for _, method := range []string{"resources/read", "prompts/get", "resources/subscribe", "completion/complete"} {
		for _, params := range []string{"", "null"} {
			body := string(rpcAt(t, url, method, params))
			if strings.Contains(body, `"result"`) || body == "" {
				t.Errorf("%s with params %q: %s", method, params, body)
			}
		}
	}
	if res := rpcAt(t, url, "prompts/get", `{"name":"greet","arguments":{"name":"x"}}`); !strings.Contains(string(res), "greet x") {
		t.Fatalf("prompts/get after: %s", res)
	}
}

// An upstream that offers tools alone (server-memory offers no prompts)
// declares no prompts or resources capability and answers prompts/list
// "method not found". The gateway declares both whatever its upstreams
// offer, so its lists of what an upstream does not offer are empty, not
// that error (found by docs/gateway.md's walk-through: /mcp's prompts/list
// in front of server-memory answered -32601).
func TestGatewayListsWhatTheUpstreamDoesNotOffer(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "ping", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil
		})
	// As the TypeScript SDK's servers do (the go-sdk's answer empty lists).
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "prompts/") || strings.HasPrefix(method, "resources/") {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found"}
			}
			return next(ctx, method, req)
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	bare := &library{srv: srv, url: hs.URL + "/mcp"}
	for _, name := range []string{"", "bare"} {
		cs := forwardingGateway(t, bare, name)
		ctx := t.Context()
		for p, err := range cs.Prompts(ctx, nil) {
			t.Errorf("upstream %q: prompts/list: %v %v", name, p, err)
		}
		for r, err := range cs.Resources(ctx, nil) {
			t.Errorf("upstream %q: resources/list: %v %v", name, r, err)
		}
		for r, err := range cs.ResourceTemplates(ctx, nil) {
			t.Errorf("upstream %q: resources/templates/list: %v %v", name, r, err)
		}
	}
}
