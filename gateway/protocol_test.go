package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/sqlitestore"
)

// withoutFacts is a served tool result's JSON without idem's facts in its
// _meta (and without _meta when nothing else was there): the stored part.
func withoutFacts(t *testing.T, raw string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	var meta map[string]json.RawMessage
	json.Unmarshal(m["_meta"], &meta)
	for k := range meta {
		if strings.HasPrefix(k, "io.idem/") {
			delete(meta, k)
		}
	}
	delete(m, "_meta")
	if len(meta) > 0 {
		m["_meta"], _ = json.Marshal(meta)
	}
	out, _ := json.Marshal(m)
	return string(out)
}

// rpc sends one JSON-RPC request to the gateway's /mcp as raw JSON (in a
// session it opens), for the shapes the SDK client cannot send
// (params.idempotencyKey), and returns the result member.
func gwRPC(t *testing.T, g *gw, method string, params string) json.RawMessage {
	t.Helper()
	body := rpcAt(t, g.url, method, params)
	var out struct {
		Result json.RawMessage
		Error  json.RawMessage
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Result == nil {
		t.Fatalf("%s: %s", method, body)
	}
	return out.Result
}

// rpcAt sends one JSON-RPC request to the gateway at url, in a session of
// its own, and returns the response as it is.
func rpcAt(t *testing.T, url, method string, params string) []byte {
	t.Helper()
	post := func(session, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var data []byte
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					data = []byte(d)
				}
			}
		} else {
			data, _ = io.ReadAll(resp.Body)
		}
		return resp, data
	}
	resp, _ := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	msg := `{"jsonrpc":"2.0","id":2,"method":"` + method + `"`
	if params != "" {
		msg += `,"params":` + params
	}
	_, body := post(session, msg+`}`)
	return body
}

type facts struct {
	Replayed    *bool  `json:"io.idem/replayed"`
	ExecutionID string `json:"io.idem/executionId"`
	Attempts    int    `json:"io.idem/attempts"`
	Other       int    `json:"x"`
}

func factsOf(t *testing.T, raw string) facts {
	t.Helper()
	var r struct {
		Meta facts `json:"_meta"`
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatal(err)
	}
	if r.Meta.Replayed == nil {
		t.Fatalf("no io.idem/replayed in %s", raw)
	}
	return r.Meta
}

// SPEC §17 rulings: the result served over MCP carries idem's facts in
// _meta, a replay marked as one, whichever of the three places the key
// came in; the stored result (what HTTP answers) is the upstream's.
func TestGatewayMarksAReplayInMeta(t *testing.T) {
	u := newUpstream(t)
	// An upstream that says io.idem/ itself is not believed; its own
	// _meta members are kept.
	u.srv.AddTool(&mcp.Tool{Name: "stamp", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.effects.Add(1)
			return &mcp.CallToolResult{Meta: mcp.Meta{"io.idem/replayed": true, "io.idem/executionId": "forged", "x": 7},
				Content: []mcp.Content{&mcp.TextContent{Text: "stamped"}}}, nil
		})
	ov := proxy.Overlay{"add": overlay["add"], "stamp": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Stamps once."}}
	g := newGateway(t, u, ov)

	_, first := call(t, g.client, &mcp.CallToolParams{Name: "stamp", Arguments: map[string]any{"n": 1, "idempotencyKey": "m-1"}})
	f := factsOf(t, first)
	if *f.Replayed || !strings.HasPrefix(f.ExecutionID, "exe_") || f.Attempts != 1 || f.Other != 7 {
		t.Fatalf("first answer's _meta: %+v (%s)", f, first)
	}
	// The same key in _meta, then as params.idempotencyKey (SEP-3182).
	_, viaMeta := call(t, g.client, &mcp.CallToolParams{Name: "stamp", Arguments: map[string]any{"n": 1}, Meta: mcp.Meta{"idempotencyKey": "m-1"}})
	viaParams := string(gwRPC(t, g, "tools/call", `{"name":"stamp","arguments":{"n":1},"idempotencyKey":"m-1"}`))
	for how, raw := range map[string]string{"_meta": viaMeta, "params": viaParams} {
		r := factsOf(t, raw)
		if !*r.Replayed || r.ExecutionID != f.ExecutionID || r.Other != 7 {
			t.Errorf("replay with the key in %s: _meta %+v (%s)", how, r, raw)
		}
		if withoutFacts(t, raw) != withoutFacts(t, first) {
			t.Errorf("replay with the key in %s: %s, first %s", how, raw, first)
		}
	}
	if u.effects.Load() != 1 {
		t.Fatalf("effects %d, want 1", u.effects.Load())
	}
	// Over HTTP the stored result, the upstream's own _meta and nothing of idem's.
	req, _ := http.NewRequest("POST", g.url+"/tools/stamp", strings.NewReader(`{"n":1}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", "m-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(body), `"io.idem/executionId":"forged"`) {
		t.Fatalf("HTTP replay: %d %s", resp.StatusCode, body)
	}

	// The description says what a gateway result carries.
	list, err := g.client.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name == "add" && (!strings.Contains(tool.Description, `_meta "io.idem/replayed": true`) || strings.Contains(tool.Description, "meta.idempotency")) {
			t.Errorf("add's description: %s", tool.Description)
		}
	}
}

// problemDetails is a pipeline problem result's details.
func problemDetails(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(res.StructuredContent)
	var p struct{ Details map[string]any }
	json.Unmarshal(raw, &p)
	return p.Details
}

func httpCall(t *testing.T, g *gw, tool, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", g.url+"/tools/"+tool, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// SPEC §17 rulings: the problems of a key in flight and of a reused key
// carry SEP-3182's type in details.type, over MCP and HTTP.
func TestGatewayKeyProblemsCarryTheProposalType(t *testing.T) {
	u := newUpstream(t)
	ov := proxy.Overlay{"add": overlay["add"],
		"slow": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Replays by key.", TimeoutMs: 20000}}
	g := newGateway(t, u, ov)
	call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 1, "idempotencyKey": "p-1"}})
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 2, "idempotencyKey": "p-1"}})
	if d := problemDetails(t, res); problemCode(res) != "IDEMPOTENCY_KEY_REUSED" || d["type"] != "idempotency_key_conflict" {
		t.Fatalf("reused over MCP: %s", raw)
	}
	if status, body := httpCall(t, g, "add", "p-1", `{"n":3}`); status != 422 || !strings.Contains(body, `"type":"idempotency_key_conflict"`) {
		t.Fatalf("reused over HTTP: %d %s", status, body)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.client.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"idempotencyKey": "p-2"}})
	}()
	<-u.slowStarted
	res, raw = call(t, g.client, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"idempotencyKey": "p-2"}})
	if d := problemDetails(t, res); problemCode(res) != "IDEMPOTENCY_KEY_IN_FLIGHT" || d["type"] != "idempotency_key_in_progress" {
		t.Fatalf("in flight over MCP: %s", raw)
	}
	if status, body := httpCall(t, g, "slow", "p-2", ""); status != 409 || !strings.Contains(body, `"type":"idempotency_key_in_progress"`) {
		t.Fatalf("in flight over HTTP: %d %s", status, body)
	}
	cancel()
	<-done
}

// SPEC §17 rulings: a zero-argument tool called over MCP with arguments
// {} or none, and over HTTP with body {} or none, under one key, is one
// intent: the first runs once, the others replay (never 422).
func TestGatewayZeroArgumentCallsAreOneIntent(t *testing.T) {
	u := newUpstream(t)
	u.srv.AddTool(&mcp.Tool{Name: "ping", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.effects.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil
		})
	g := newGateway(t, u, proxy.Overlay{"ping": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Pings once."}})
	mcpEmpty := func(key string) (bool, string) {
		res, raw := call(t, g.client, &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{}, Meta: mcp.Meta{"idempotencyKey": key}})
		return !res.IsError && *factsOf(t, raw).Replayed, raw
	}
	mcpAbsent := func(key string) (bool, string) {
		raw := string(gwRPC(t, g, "tools/call", `{"name":"ping","idempotencyKey":"`+key+`"}`))
		return !strings.Contains(raw, `"isError":true`) && *factsOf(t, raw).Replayed, raw
	}
	httpBody := func(body string) func(string) (bool, string) {
		return func(key string) (bool, string) {
			req, _ := http.NewRequest("POST", g.url+"/tools/ping", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Idempotency-Key", key)
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200 && resp.Header.Get("Idempotent-Replayed") == "true", string(b)
		}
	}
	ways := []struct {
		name string
		call func(key string) (bool, string)
	}{
		{"MCP arguments {}", mcpEmpty}, {"MCP without arguments", mcpAbsent},
		{"HTTP body {}", httpBody(`{}`)}, {"HTTP body { }", httpBody(" { \n} ")}, {"HTTP without a body", httpBody("")},
	}
	// Each way first under its own key, then every other way replays it.
	for i, first := range ways {
		key := fmt.Sprintf("z-%d", i)
		before := u.effects.Load()
		if replayed, raw := first.call(key); replayed {
			t.Fatalf("%s first: %s", first.name, raw)
		}
		for j, again := range ways {
			if i == j {
				continue
			}
			if replayed, raw := again.call(key); !replayed {
				t.Errorf("%s after %s under one key: %s", again.name, first.name, raw)
			}
		}
		if n := u.effects.Load() - before; n != 1 {
			t.Errorf("%s first: the upstream ran %d times", first.name, n)
		}
	}
}

// SPEC §17 rulings: dryRun is an ordinary argument of a gateway tool
// (server-filesystem's edit_file): the tool is served, dryRun goes to the
// upstream like any argument and is part of the fingerprint. A tool
// without such an argument still refuses a dryRun: true (it has no
// preview) rather than run live.
func TestGatewayDryRunIsAnOrdinaryArgument(t *testing.T) {
	u := newUpstream(t)
	var got atomic.Value
	u.srv.AddTool(&mcp.Tool{Name: "edit_file", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"dryRun":{"type":"boolean","default":false}},"required":["path"]}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.effects.Add(1)
			got.Store(string(req.Params.Arguments))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "diff"}}}, nil
		})
	g := newGateway(t, u, proxy.Overlay{
		"edit_file": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Edits once."},
		"add":       overlay["add"]})
	list, err := g.client.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var schema string
	for _, tool := range list.Tools {
		if tool.Name == "edit_file" {
			b, _ := json.Marshal(tool.InputSchema)
			schema = string(b)
		}
	}
	if !strings.Contains(schema, `"dryRun":{"default":false,"type":"boolean"}`) {
		t.Fatalf("edit_file served with schema %q", schema)
	}
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "edit_file", Arguments: map[string]any{"path": "a", "dryRun": true, "idempotencyKey": "d-1"}})
	if res.IsError || got.Load() != `{"dryRun":true,"path":"a"}` {
		t.Fatalf("edit_file with dryRun: %s; the upstream got %v", raw, got.Load())
	}
	// dryRun is in the fingerprint: false under the same key is another intent.
	res, raw = call(t, g.client, &mcp.CallToolParams{Name: "edit_file", Arguments: map[string]any{"path": "a", "dryRun": false, "idempotencyKey": "d-1"}})
	if problemCode(res) != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("dryRun false under the key of dryRun true: %s", raw)
	}
	// Over HTTP it is a body member: the same intent, replayed.
	if status, body := httpCall(t, g, "edit_file", "d-1", `{"path":"a","dryRun":true}`); status != 200 || !strings.Contains(body, "diff") {
		t.Fatalf("HTTP with dryRun in the body: %d %s", status, body)
	}
	if u.effects.Load() != 1 {
		t.Fatalf("effects %d, want 1", u.effects.Load())
	}
	// A tool without the argument: dryRun is the control argument, refused.
	res, raw = call(t, g.client, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 1, "dryRun": true}})
	if problemCode(res) != "DRY_RUN_NOT_SUPPORTED" || u.effects.Load() != 1 {
		t.Fatalf("dryRun on a tool without it: %s", raw)
	}
}

// Issue 34 item 7: the served tool keeps the upstream's title,
// outputSchema and the annotations the contract does not decide.
func TestGatewayKeepsToolMetadata(t *testing.T) {
	u := newUpstream(t)
	u.srv.AddTool(&mcp.Tool{Name: "weather", Title: "Weather", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"temp":{"type":"number"}},"required":["temp"]}`),
		Annotations:  &mcp.ToolAnnotations{Title: "Weather now", ReadOnlyHint: true, OpenWorldHint: ptr(true)}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"temp":21}`}}, StructuredContent: map[string]any{"temp": 21}}, nil
		})
	u.srv.AddTool(&mcp.Tool{Name: "book", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: map[string]any{"id": "b1"}}, nil
		})
	ov := proxy.Overlay{"book": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Books once."}}
	g := newGateway(t, u, ov)
	// An error idem answers for a tool with an outputSchema keeps its
	// problem out of structuredContent (clients check it against the
	// schema, even on isError), in _meta.
	res, raw := call(t, g.client, &mcp.CallToolParams{Name: "book"})
	if p, _ := res.Meta["io.idem/problem"].(map[string]any); !res.IsError || res.StructuredContent != nil || p["code"] != "IDEMPOTENCY_KEY_REQUIRED" {
		t.Fatalf("an idem error on a tool with an outputSchema: %s", raw)
	}
	list, err := g.client.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var w *mcp.Tool
	for _, tool := range list.Tools {
		if tool.Name == "weather" {
			w = tool
		}
	}
	if w == nil {
		t.Fatal("weather is not served")
	}
	out, _ := json.Marshal(w.OutputSchema)
	if a := w.Annotations; w.Title != "Weather" || a.Title != "Weather now" || a.OpenWorldHint == nil || !*a.OpenWorldHint || !a.ReadOnlyHint ||
		!strings.Contains(string(out), `"temp"`) {
		t.Fatalf("served: title %q, annotations %+v, outputSchema %s", w.Title, a, out)
	}
	// The client checks structuredContent against the outputSchema.
	if res, raw := call(t, g.client, &mcp.CallToolParams{Name: "weather"}); res.IsError {
		t.Fatalf("weather: %s", raw)
	}
}

// Issue 34 items 4 and 6: each upstream call of a traced execution is a
// CLIENT span (the MCP semantic conventions) under the attempt's, and
// carries its trace context in the call's _meta.
func TestGatewayUpstreamCallIsAClientSpan(t *testing.T) {
	u := newUpstream(t)
	var got atomic.Value
	u.srv.AddTool(&mcp.Tool{Name: "note", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			got.Store(req.Params.Meta)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "noted"}}}, nil
		})
	up := dial(t, gateway.UpstreamConfig{URL: u.url})
	reg, err := idem.NewRegistry(build(t, up, proxy.Overlay{"note": {Kind: idem.RetrySameKeyReplay, Reconcile: "total", Rationale: "Notes once."}})...)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rec := tracetest.NewSpanRecorder()
	r, err := pipeline.New(reg, pipeline.Config{Store: store, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res := r.Call(t.Context(), idem.Invocation{Operation: "note", Surface: idem.SurfaceHTTP, Key: "t-1",
		Principal: idem.Principal{Org: "o", ID: "agent", Kind: idem.KindAgent}, Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{}`)}})
	if res.Status != 200 {
		t.Fatalf("call: %d %s", res.Status, res.Body())
	}
	var client sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			client = s
		}
	}
	if client == nil || client.Name() != "tools/call note" {
		t.Fatalf("no CLIENT span tools/call note among %d spans", len(rec.Ended()))
	}
	attrs := map[string]string{}
	for _, a := range client.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["mcp.method.name"] != "tools/call" || attrs["gen_ai.tool.name"] != "note" || attrs["gen_ai.operation.name"] != "execute_tool" {
		t.Fatalf("client span attributes %v", attrs)
	}
	meta, _ := got.Load().(mcp.Meta)
	want := "00-" + client.SpanContext().TraceID().String() + "-" + client.SpanContext().SpanID().String() + "-01"
	if tp, _ := meta["traceparent"].(string); tp != want || !client.Parent().IsValid() {
		t.Fatalf("the upstream got _meta %v, want traceparent %s under the attempt's span", meta, want)
	}
	if k, _ := meta["idempotencyKey"].(string); !strings.HasPrefix(k, "ik_") {
		t.Fatalf("the upstream got _meta %v, want the handler key kept", meta)
	}
}
