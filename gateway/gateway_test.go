package gateway_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/server"
)

// upstream is an in-process MCP server on the go-sdk, served over
// streamable HTTP: a counter whose add tool has an effect, a failing
// tool, a slow one, and a read.
type upstream struct {
	srv     *mcp.Server
	effects atomic.Int64
	url     string
	addr    string
	http    *http.Server
	release chan struct{}
	// slowStarted gets a value when slow starts; slowEnded when its
	// context ends (the gateway cancelled it).
	slowStarted, slowEnded chan struct{}
	// header is the X-Upstream-Token of the last request.
	header atomic.Value
	// key is the _meta.idempotencyKey of add's last call.
	key atomic.Value
	// opts are the streamable HTTP handler's (nil: the SDK's defaults).
	opts *mcp.StreamableHTTPOptions
	// requests counts the HTTP requests the upstream got.
	requests atomic.Int64
}

func newUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{release: make(chan struct{}), slowStarted: make(chan struct{}, 10), slowEnded: make(chan struct{}, 10)}
	// Two tools a page: the gateway must read every page of tools/list.
	u.srv = mcp.NewServer(&mcp.Implementation{Name: "counter", Version: "1"}, &mcp.ServerOptions{PageSize: 2})
	obj := func(props string) json.RawMessage {
		return json.RawMessage(`{"type":"object","properties":` + props + `}`)
	}
	u.srv.AddTool(&mcp.Tool{Name: "add", Description: "Add n to the counter.", InputSchema: obj(`{"n":{"type":"integer"}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ N int64 }
			json.Unmarshal(req.Params.Arguments, &args)
			k, _ := req.Params.Meta["idempotencyKey"].(string)
			u.key.Store(k)
			v := u.effects.Add(args.N)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}},
				StructuredContent: map[string]any{"total": v, "z": 1, "a": 2}}, nil
		})
	u.srv.AddTool(&mcp.Tool{Name: "fail", Description: "Always fails.", InputSchema: obj(`{}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.effects.Add(1)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "boom"}}}, nil
		})
	u.srv.AddTool(&mcp.Tool{Name: "total", Description: "Read the counter.", InputSchema: obj(`{}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "total"}},
				StructuredContent: map[string]any{"total": u.effects.Load()}}, nil
		})
	u.srv.AddTool(&mcp.Tool{Name: "reset", Description: "Set the counter to zero.", InputSchema: obj(`{}`),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(true)}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.effects.Store(0)
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		})
	u.srv.AddTool(&mcp.Tool{Name: "slow", Description: "Holds the call until it is cancelled.", InputSchema: obj(`{}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.effects.Add(1)
			u.slowStarted <- struct{}{}
			<-ctx.Done()
			u.slowEnded <- struct{}{}
			return nil, ctx.Err()
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.url = "http://" + u.addr + "/mcp"
	u.serve(t, ln)
	return u
}

func (u *upstream) serve(t testing.TB, ln net.Listener) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.srv }, u.opts)
	u.http = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		u.header.Store(r.Header.Get("X-Upstream-Token"))
		h.ServeHTTP(w, r)
	})}
	go u.http.Serve(ln)
	t.Cleanup(func() { u.http.Close() })
}

func ptr[T any](v T) *T { return &v }

const token = "agent-token"

// gw is a gateway in front of an upstream, with an SDK client on its /mcp.
type gw struct {
	srv    *server.Server
	url    string
	client *mcp.ClientSession
	up     *gateway.Upstream
	// changed counts tools/list_changed notifications the client got.
	changed chan struct{}
}

func newGateway(t testing.TB, u *upstream, overlay proxy.Overlay) *gw {
	t.Helper()
	ctx := t.Context()
	g := &gw{changed: make(chan struct{}, 10)}
	var reload func()
	up := dial(t, gateway.UpstreamConfig{URL: u.url, OnToolsChanged: func() { reload() },
		Header: http.Header{"X-Upstream-Token": {"s3cr3t"}}})
	g.up = up
	declare := func() []idem.Operation {
		tools, err := up.Tools(ctx)
		if err != nil {
			t.Error(err)
			return nil
		}
		built, err := gateway.Build(tools, overlay, up, gateway.Options{})
		if err != nil {
			t.Error(err)
		}
		return built.Operations
	}
	url, srv := serveGateway(t, "", declare(), nil)
	var mu sync.Mutex
	reload = func() {
		mu.Lock()
		defer mu.Unlock()
		if err := srv.Reload(context.Background(), declare(), nil); err != nil {
			t.Error(err)
		}
	}
	g.srv, g.url = srv, url
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { g.changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	g.client = cs
	return g
}

type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultTransport.RoundTrip(r)
}

var overlay = proxy.Overlay{
	"add":  {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Adding twice would count twice."},
	"fail": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Replays by key."},
	"slow": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Replays by key.", TimeoutMs: 200},
}

func call(t *testing.T, cs *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), p)
	if err != nil {
		t.Fatalf("call %s: %v", p.Name, err)
	}
	raw, _ := json.Marshal(res)
	return res, string(raw)
}

// problemCode is the code of a pipeline problem result, "" otherwise.
func problemCode(res *mcp.CallToolResult) string {
	raw, _ := json.Marshal(res.StructuredContent)
	var p struct{ Code string }
	json.Unmarshal(raw, &p)
	return p.Code
}

func TestGatewayReplaysTheStoredToolResult(t *testing.T) {
	u := newUpstream(t)
	g := newGateway(t, u, overlay)
	args := map[string]any{"n": 5, "idempotencyKey": "k-1"}
	first, firstRaw := call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: args})
	if first.IsError || u.effects.Load() != 5 {
		t.Fatalf("first call: %s, effects %d", firstRaw, u.effects.Load())
	}
	if h, _ := u.header.Load().(string); h != "s3cr3t" {
		t.Fatalf("the upstream got X-Upstream-Token %q", h)
	}
	if k, _ := u.key.Load().(string); !strings.HasPrefix(k, "ik_") {
		t.Fatalf("the upstream got _meta.idempotencyKey %q, want the execution's handler key", k)
	}
	// structuredContent is the upstream's, not an idem envelope.
	if !strings.Contains(firstRaw, `"structuredContent":{"a":2,"total":5,"z":1}`) {
		t.Fatalf("first call: %s", firstRaw)
	}
	_, again := call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: args})
	// The served _meta differs (io.idem/replayed); the rest is the stored result.
	firstRaw = withoutFacts(t, firstRaw)
	if withoutFacts(t, again) != firstRaw || u.effects.Load() != 5 {
		t.Fatalf("replay %s, first %s, effects %d", again, firstRaw, u.effects.Load())
	}
	// The key in _meta is the same key.
	_, viaMeta := call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 5}, Meta: mcp.Meta{"idempotencyKey": "k-1"}})
	if withoutFacts(t, viaMeta) != firstRaw || u.effects.Load() != 5 {
		t.Fatalf("replay by _meta key %s, effects %d", viaMeta, u.effects.Load())
	}
	// Over HTTP: POST /tools/add, the same record.
	req, _ := http.NewRequest("POST", g.url+"/tools/add", strings.NewReader(`{"n":5}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("HTTP replay: %d %v", resp.StatusCode, resp.Header)
	}
	res, _ := call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 6, "idempotencyKey": "k-1"}})
	if code := problemCode(res); !res.IsError || code != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("another intent under the key: %s", code)
	}
	res, _ = call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 1}})
	if code := problemCode(res); !res.IsError || code != "IDEMPOTENCY_KEY_REQUIRED" {
		t.Fatalf("no key: %s", code)
	}
	res, _ = call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 1, "idempotencyKey": "k-2"}, Meta: mcp.Meta{"idempotencyKey": "k-3"}})
	if code := problemCode(res); !res.IsError || code != "IDEMPOTENCY_KEY_INVALID" {
		t.Fatalf("two keys: %s", code)
	}
	res, _ = call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": "five", "idempotencyKey": "k-4"}})
	if code := problemCode(res); !res.IsError || code != "INVALID_INPUT" {
		t.Fatalf("invalid input: %s", code)
	}
	if u.effects.Load() != 5 {
		t.Fatalf("effects %d, want 5", u.effects.Load())
	}
}

func TestGatewayUpstreamErrorIsIndeterminate(t *testing.T) {
	u := newUpstream(t)
	g := newGateway(t, u, overlay)
	args := map[string]any{"idempotencyKey": "f-1"}
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "fail", Arguments: args})
	if !res.IsError || !strings.Contains(raw, "boom") {
		t.Fatalf("first: %s", raw)
	}
	res, raw = call(t, g.client, &mcp.CallToolParams{Name: "fail", Arguments: args})
	if code := problemCode(res); code != "IDEMPOTENCY_RESULT_INDETERMINATE" || !strings.Contains(raw, `"reconcile":"total"`) {
		t.Fatalf("same key after an upstream error: %s", raw)
	}
	if u.effects.Load() != 1 {
		t.Fatalf("the failing tool ran %d times", u.effects.Load())
	}
}

func TestGatewayUnreachableUpstreamFreesTheKey(t *testing.T) {
	u := newUpstream(t)
	g := newGateway(t, u, overlay)
	u.http.Close() // the upstream goes away
	args := map[string]any{"n": 2, "idempotencyKey": "u-1"}
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: args})
	if code := problemCode(res); code != "UPSTREAM_UNAVAILABLE" || !strings.Contains(raw, `"retryable":true`) {
		t.Fatalf("upstream down: %s", raw)
	}
	// It comes back (a new process: a new session); the same key runs once.
	ln, err := net.Listen("tcp", u.addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", u.addr, err)
	}
	u.serve(t, ln)
	res, raw = call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: args})
	if res.IsError || u.effects.Load() != 2 {
		t.Fatalf("same key once the upstream is back: %s (effects %d)", raw, u.effects.Load())
	}
}

func TestGatewayAnnotationsComeFromTheContract(t *testing.T) {
	u := newUpstream(t)
	ov := proxy.Overlay{"add": overlay["add"], "reset": {Reconcile: "total"}}
	g := newGateway(t, u, ov)
	list, err := g.client.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Tool{}
	for _, tool := range list.Tools {
		got[tool.Name] = tool
	}
	for name, want := range map[string]struct {
		readOnly, idempotent, destructive, key bool
	}{
		"add":   {false, false, false, true},  // same_key_replay, write
		"total": {true, true, false, false},   // fresh_read
		"reset": {false, true, true, false},   // convergent (hint + overlay reconcile), destructive
		"fail":  {false, false, false, false}, // no_automatic_retry
	} {
		tool := got[name]
		if tool == nil {
			t.Fatalf("tool %s not served (%v)", name, got)
		}
		a := tool.Annotations
		schema, _ := json.Marshal(tool.InputSchema)
		if a.ReadOnlyHint != want.readOnly || a.IdempotentHint != want.idempotent || *a.DestructiveHint != want.destructive ||
			strings.Contains(string(schema), "idempotencyKey") != want.key {
			t.Errorf("%s: annotations %+v, schema %s, want %+v", name, a, schema, want)
		}
	}
}

func TestGatewayFollowsTheUpstreamToolList(t *testing.T) {
	u := newUpstream(t)
	g := newGateway(t, u, overlay)
	u.srv.AddTool(&mcp.Tool{Name: "double", Description: "Double the counter.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		})
	select {
	case <-g.changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no tools/list_changed reached the gateway's client")
	}
	list, err := g.client.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "double") {
		t.Fatalf("tools after the upstream's change: %v", names)
	}
	// Nothing changed: no notification downstream.
	if err := g.srv.Reload(t.Context(), build(t, g.up, overlay), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.changed:
		t.Fatal("a reload that changed nothing notified the client")
	case <-time.After(300 * time.Millisecond):
	}
}

func TestGatewayTimeoutIsIndeterminate(t *testing.T) {
	u := newUpstream(t)
	g := newGateway(t, u, overlay)
	args := map[string]any{"idempotencyKey": "s-1"}
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "slow", Arguments: args})
	if code := problemCode(res); code != "TIMEOUT" || !strings.Contains(raw, `"retryable":false`) {
		t.Fatalf("a call past its timeout: %s", raw)
	}
	res, raw = call(t, g.client, &mcp.CallToolParams{Name: "slow", Arguments: args})
	if code := problemCode(res); code != "IDEMPOTENCY_RESULT_INDETERMINATE" {
		t.Fatalf("same key after a timeout: %s", raw)
	}
	if u.effects.Load() != 1 {
		t.Fatalf("the slow tool ran %d times", u.effects.Load())
	}
}

func TestGatewayCancellationReachesTheUpstream(t *testing.T) {
	u := newUpstream(t)
	ov := proxy.Overlay{"slow": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Replays by key.", TimeoutMs: 20000}}
	g := newGateway(t, u, ov)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := g.client.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"idempotencyKey": "c-1"}})
		done <- err
	}()
	select {
	case <-u.slowStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached the upstream")
	}
	cancel() // the SDK client sends notifications/cancelled
	select {
	case <-u.slowEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's call was not cancelled")
	}
	<-done
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"idempotencyKey": "c-1"}})
	if code := problemCode(res); code != "IDEMPOTENCY_RESULT_INDETERMINATE" && code != "IDEMPOTENCY_KEY_IN_FLIGHT" {
		t.Fatalf("same key after a cancelled call: %s", raw)
	}
	if u.effects.Load() != 1 {
		t.Fatalf("the slow tool ran %d times", u.effects.Load())
	}
}

func TestGatewayUpstreamRestartOpensANewSession(t *testing.T) {
	u := newUpstream(t)
	g := newGateway(t, u, overlay)
	call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 1, "idempotencyKey": "r-1"}})
	// The upstream restarts at once: it forgot the gateway's session.
	u.http.Close()
	ln, err := net.Listen("tcp", u.addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", u.addr, err)
	}
	u.serve(t, ln)
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 1, "idempotencyKey": "r-2"}})
	if res.IsError || u.effects.Load() != 2 {
		t.Fatalf("a call after the upstream restarted: %s (effects %d)", raw, u.effects.Load())
	}
}
