package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/pipeline"
)

func TestToolsListMatchesGolden(t *testing.T) {
	f := start(t)
	msg := f.raw(t, tokenAgent).call("tools/list", map[string]any{})
	var resp struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(msg, &resp); err != nil || resp.Result == nil {
		t.Fatalf("tools/list answered %s", msg)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, resp.Result, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	golden(t, "tools.golden.json", out.Bytes())
}

// The annotations are on the wire for every tool, false ones included
// (SPEC §10.2), with the values the declarations give.
func TestAnnotationsAreExplicitOnTheWire(t *testing.T) {
	f := start(t)
	msg := f.raw(t, tokenAgent).call("tools/list", map[string]any{})
	var resp struct {
		Result struct {
			Tools []struct {
				Name        string                     `json:"name"`
				Annotations map[string]json.RawMessage `json:"annotations"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(msg, &resp); err != nil {
		t.Fatal(err)
	}
	// readOnly, destructive, idempotent, openWorld
	want := map[string][4]bool{
		"gadget.create": {false, false, false, false},
		"gadget.list":   {true, false, true, false},
		"gadget.bind":   {false, false, true, false},
		"gadget.scrap":  {false, true, true, false},
		"gadget.ship":   {false, false, false, true},
		"gadget.token":  {false, false, false, false},
	}
	if len(resp.Result.Tools) != len(want) {
		t.Fatalf("tools/list has %d tools, want %d", len(resp.Result.Tools), len(want))
	}
	for _, tool := range resp.Result.Tools {
		w, ok := want[tool.Name]
		if !ok {
			t.Fatalf("unexpected tool %s", tool.Name)
		}
		for i, hint := range []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} {
			raw, present := tool.Annotations[hint]
			if !present {
				t.Errorf("%s: %s is not on the wire: %v", tool.Name, hint, tool.Annotations)
				continue
			}
			if got := string(raw); got != map[bool]string{true: "true", false: "false"}[w[i]] {
				t.Errorf("%s: %s = %s, want %v", tool.Name, hint, got, w[i])
			}
		}
	}
}

// Parity: every tool is an operation exposed on mcp with an HTTP route, and
// every operation exposed on mcp is a tool.
func TestToolsAreTheMCPOperations(t *testing.T) {
	f := start(t)
	list, err := f.connect(t, tokenAgent).ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tool := range list.Tools {
		tools[tool.Name] = tool
	}
	descs := map[string]idem.Descriptor{}
	for _, d := range f.runner.Descriptors() {
		descs[d.Name] = d
		if slices.Contains(d.Surfaces, idem.SurfaceMCP) && tools[d.Name] == nil {
			t.Errorf("operation %s is exposed on mcp but is not a tool", d.Name)
		}
		if !slices.Contains(d.Surfaces, idem.SurfaceMCP) && tools[d.Name] != nil {
			t.Errorf("operation %s is not exposed on mcp but is a tool", d.Name)
		}
	}
	for name, tool := range tools {
		d, ok := descs[name]
		if !ok {
			t.Errorf("tool %s is no operation", name)
			continue
		}
		if !slices.Contains(d.Surfaces, idem.SurfaceHTTP) {
			t.Errorf("tool %s: operation not exposed on http", name)
		}
		// The route exists: without a token it answers 401, not 404 or 405.
		params := map[string]string{}
		for _, p := range d.Params {
			params[p.Name] = "x"
		}
		req, _ := http.NewRequest(d.Method, f.url+idem.FillPath(d.Path, params), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("tool %s: %s %s answered %d, want 401 from the operation's route", name, d.Method, d.Path, resp.StatusCode)
		}
		// The reserved arguments follow the contract.
		schema, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		_ = json.Unmarshal(schema, &s)
		_, hasKey := s.Properties[mcpserver.ArgIdempotencyKey]
		_, hasDryRun := s.Properties[mcpserver.ArgDryRun]
		if hasKey != (d.Retry.Kind == idem.RetrySameKeyReplay) || hasKey != slices.Contains(s.Required, mcpserver.ArgIdempotencyKey) {
			t.Errorf("tool %s (%s): idempotencyKey in properties %v, in required %v", name, d.Retry.Kind, hasKey, slices.Contains(s.Required, mcpserver.ArgIdempotencyKey))
		}
		if hasDryRun != d.Retry.Preview {
			t.Errorf("tool %s: dryRun in properties %v, preview %v", name, hasDryRun, d.Retry.Preview)
		}
	}
}

func TestKeyedCallReturnsTheEnvelopeAndReplays(t *testing.T) {
	f := start(t)
	cs := f.connect(t, tokenAgent)
	args := map[string]any{"shop": "s1", "name": "a", "idempotencyKey": "k-1"}
	first := call(t, cs, "gadget.create", args)
	body := structured(t, first)
	if first.IsError || at(body, "data.name") != "a" || at(body, "meta.operation") != "gadget.create" ||
		at(body, "meta.idempotency.key") != "k-1" || at(body, "meta.idempotency.replayed") != false {
		t.Fatalf("first call: isError %v, %v", first.IsError, body)
	}
	var fromText map[string]any
	if err := json.Unmarshal([]byte(text(t, first)), &fromText); err != nil || !reflect.DeepEqual(fromText, body) {
		t.Fatalf("text content %q is not the envelope", text(t, first))
	}
	again := structured(t, call(t, cs, "gadget.create", args))
	if at(again, "meta.idempotency.replayed") != true || at(again, "meta.executionId") != at(body, "meta.executionId") ||
		!reflect.DeepEqual(again["data"], body["data"]) {
		t.Fatalf("second call is not a replay of %v: %v", body, again)
	}
	if n := f.creates.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestCallWithoutKeyIsKeyRequired(t *testing.T) {
	f := start(t)
	res := call(t, f.connect(t, tokenAgent), "gadget.create", map[string]any{"shop": "s1", "name": "a"})
	p := wantProblem(t, res, idem.CodeIdempotencyKeyRequired)
	if !strings.HasPrefix(text(t, res), "IDEMPOTENCY_KEY_REQUIRED: ") || p["status"] != 400.0 || at(p, "meta.operation") != "gadget.create" {
		t.Fatalf("problem %v, text %q", p, text(t, res))
	}
	// In the agent's terms: the tool's argument, not the HTTP header.
	if d, _ := p["detail"].(string); !strings.Contains(d, "idempotencyKey argument") || strings.Contains(d, "Idempotency-Key") || strings.Contains(text(t, res), "Idempotency-Key") {
		t.Errorf("detail %q, text %q: want the idempotencyKey argument named, not the Idempotency-Key header", d, text(t, res))
	}
	if n := f.creates.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

// The reserved arguments reach the runner as the invocation's key and dry
// run; the runner answers every contract check after their types.
func TestReservedArgumentsAndValidation(t *testing.T) {
	f := start(t)
	cs := f.connect(t, tokenAgent)
	bind := func(extra map[string]any) map[string]any {
		args := map[string]any{"shop": "s1", "name": "g", "environment": "preview", "originUrl": "https://example.com"}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		code idem.Code // "" for success
		want map[string]any
	}{
		{"key not a string", "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": 5}, idem.CodeIdempotencyKeyInvalid, nil},
		{"empty key", "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": ""}, idem.CodeIdempotencyKeyInvalid, nil},
		{"malformed key", "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": "a b"}, idem.CodeIdempotencyKeyInvalid, nil},
		{"key on convergent", "gadget.bind", bind(map[string]any{"idempotencyKey": "k"}), idem.CodeIdempotencyKeyNotSupported, nil},
		{"key with dry run", "gadget.bind", bind(map[string]any{"idempotencyKey": "k", "dryRun": true}), idem.CodeIdempotencyKeyNotSupported, nil},
		{"dry run without preview", "gadget.create", map[string]any{"shop": "s1", "name": "a", "dryRun": true}, idem.CodeDryRunNotSupported, nil},
		{"dry run not a boolean", "gadget.bind", bind(map[string]any{"dryRun": "yes"}), idem.CodeInvalidInput, nil},
		{"dry run null", "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": "k-null", "dryRun": nil}, idem.CodeInvalidInput, nil},
		{"dry run 1", "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": "k-one", "dryRun": 1}, idem.CodeInvalidInput, nil},
		// The order of SPEC §6.4, as on HTTP: a malformed dryRun is
		// answered before a malformed key.
		{"malformed dry run beats malformed key", "gadget.bind", bind(map[string]any{"dryRun": "yes", "idempotencyKey": "a b"}), idem.CodeInvalidInput, nil},
		{"dry run a string", "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": "k-string", "dryRun": "false"}, idem.CodeInvalidInput, nil},
		{"unknown argument", "gadget.bind", bind(map[string]any{"colour": "red"}), idem.CodeInvalidInput, nil},
		{"invalid value", "gadget.bind", bind(map[string]any{"environment": "staging"}), idem.CodeInvalidInput, nil},
		{"path argument not a scalar", "gadget.list", map[string]any{"shop": map[string]any{"a": 1}}, idem.CodeInvalidInput, nil},
		{"missing argument", "gadget.create", map[string]any{"shop": "s1", "idempotencyKey": "k-missing"}, idem.CodeInvalidInput, nil},
		{"key ignored on fresh_read", "gadget.list", map[string]any{"shop": "s1", "idempotencyKey": 5}, "", map[string]any{"meta.idempotency": nil}},
		{"dry run", "gadget.bind", bind(map[string]any{"dryRun": true}), "", map[string]any{"meta.dryRun": true, "data.wouldBind": "https://example.com"}},
		{"live convergent call", "gadget.bind", bind(map[string]any{"dryRun": false}), "", map[string]any{"data.environment": "preview"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, tc.tool, tc.args)
			if tc.code != "" {
				p := wantProblem(t, res, tc.code)
				if tc.code == idem.CodeInvalidInput && at(p, "details.errors") == nil {
					t.Fatalf("INVALID_INPUT without details.errors: %v", p)
				}
				// In the agent's terms: arguments, not HTTP headers or query parameters.
				if d, _ := p["detail"].(string); strings.Contains(d, "Idempotency-Key") || strings.Contains(d, "dryRun=true") {
					t.Errorf("detail %q names HTTP's header or query parameter, not the tool's argument", d)
				}
				return
			}
			body := structured(t, res)
			if res.IsError {
				t.Fatalf("got an error: %v", body)
			}
			for path, want := range tc.want {
				if got := at(body, path); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s = %v, want %v in %v", path, got, want, body)
				}
			}
		})
	}
	// A repeated name would keep the last value: {"dryRun": true,
	// "dryRun": false} must not run live.
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "gadget.create",
		Arguments: json.RawMessage(`{"shop":"s1","name":"a","idempotencyKey":"k-repeat","dryRun":true,"dryRun":false}`)})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, res, idem.CodeInvalidInput)
	if n := f.creates.Load(); n != 0 {
		t.Fatalf("gadget.create ran %d times, want 0", n)
	}
}

// An MCP call is the same intent as the HTTP call: a key used on one
// surface replays on the other.
func TestKeyReplaysAcrossSurfaces(t *testing.T) {
	f := start(t)
	cs := f.connect(t, tokenAgent)
	post := func(path, body, key string) (int, http.Header, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", f.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokenAgent)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: %s", path, raw)
		}
		return resp.StatusCode, resp.Header, out
	}

	// MCP first, then HTTP.
	viaMCP := structured(t, call(t, cs, "gadget.create", map[string]any{"shop": "s2", "name": "b", "idempotencyKey": "x-1"}))
	status, header, viaHTTP := post("/v1/shops/s2/gadgets", `{"name": "b"}`, "x-1")
	if status != 201 || header.Get("Idempotent-Replayed") != "true" || at(viaHTTP, "meta.executionId") != at(viaMCP, "meta.executionId") {
		t.Fatalf("HTTP after MCP: %d %v %v; MCP answered %v", status, header, viaHTTP, viaMCP)
	}

	// HTTP first, then MCP.
	status, _, viaHTTP = post("/v1/shops/s2/gadgets", `{"name": "c"}`, "x-2")
	if status != 201 || at(viaHTTP, "meta.idempotency.replayed") != false {
		t.Fatalf("HTTP: %d %v", status, viaHTTP)
	}
	viaMCP = structured(t, call(t, cs, "gadget.create", map[string]any{"shop": "s2", "name": "c", "idempotencyKey": "x-2"}))
	if at(viaMCP, "meta.idempotency.replayed") != true || at(viaMCP, "meta.executionId") != at(viaHTTP, "meta.executionId") {
		t.Fatalf("MCP after HTTP: %v; HTTP answered %v", viaMCP, viaHTTP)
	}

	// Another intent under the same key is a reuse, whichever the surface.
	wantProblem(t, call(t, cs, "gadget.create", map[string]any{"shop": "s2", "name": "d", "idempotencyKey": "x-2"}), idem.CodeIdempotencyKeyReused)
	if n := f.creates.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

// An unknown tool, or an operation not exposed on mcp, is the protocol
// error of the MCP specification (JSON-RPC -32602), not a tool result.
func TestUnknownToolIsAProtocolError(t *testing.T) {
	f := start(t)
	cs := f.connect(t, tokenAgent)
	for _, name := range []string{"gadget.nope", "gadget.audit"} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"shop": "s1"}})
		var jerr *jsonrpc.Error
		if !errors.As(err, &jerr) || jerr.Code != jsonrpc.CodeInvalidParams {
			t.Fatalf("call %s = %v, %v; want JSON-RPC error %d", name, res, err, jsonrpc.CodeInvalidParams)
		}
	}
	msg := f.raw(t, tokenAgent).call("tools/call", map[string]any{"name": "gadget.nope", "arguments": map[string]any{}})
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg, &resp); err != nil || resp.Result != nil || resp.Error.Code != -32602 {
		t.Fatalf("tools/call of an unknown tool answered %s", msg)
	}
}

// shipReport waits for the report of the next finished gadget.ship call.
func (f *fixture) shipReport(t *testing.T) pipeline.Report {
	t.Helper()
	for {
		if r := f.report(t); r.Operation == "gadget.ship" {
			return r
		}
	}
}

// wantCancelledOnce checks execution id's audit trail: one attempt, one
// final event, code CANCELLED.
func (f *fixture) wantCancelledOnce(t *testing.T, id string) {
	t.Helper()
	x, err := f.runner.GetExecution(context.Background(), approver, id)
	if err != nil {
		t.Fatal(err)
	}
	var finals []idem.AuditEvent
	for _, e := range x.Events {
		switch e.Type {
		case idem.EventSucceeded, idem.EventFailed:
			finals = append(finals, e)
		case idem.EventRetried:
			t.Errorf("execution %s was retried: %+v", id, e)
		}
	}
	if len(finals) != 1 || finals[0].Code != idem.CodeCancelled || x.Attempts != 1 || x.Code == nil || *x.Code != idem.CodeCancelled {
		t.Fatalf("execution %s: attempts %d, code %v, final events %+v; want one final event CANCELLED after 1 attempt", id, x.Attempts, x.Code, finals)
	}
	if n := f.ships.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// The SDK client cancelling its call (notifications/cancelled and a dropped
// stream) cancels the execution: finalized once as CANCELLED, never
// retried, and the key is indeterminate from then on.
func TestCancelledCallIsFinalizedOnceAsCancelled(t *testing.T) {
	f := start(t)
	cs := f.connect(t, tokenAgent)
	ctx, cancel := context.WithCancel(t.Context())
	args := map[string]any{"shop": "s1", "name": "g", "idempotencyKey": "ship-1"}
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gadget.ship", Arguments: args})
		errc <- err
	}()
	id := f.waitStarted(t)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call returned %v", err)
	}
	if r := f.shipReport(t); r.Code != idem.CodeCancelled || r.Attempts != 1 {
		t.Fatalf("report %+v, want CANCELLED after 1 attempt", r)
	}
	f.wantCancelledOnce(t, id)
	// The key now names an indeterminate attempt: never re-executed.
	p := wantProblem(t, call(t, cs, "gadget.ship", args), idem.CodeIdempotencyResultIndeterminate)
	if at(p, "details.reconcile") != "gadget.list" {
		t.Fatalf("problem %v", p)
	}
	if n := f.ships.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// notifications/cancelled alone, the stream kept open, cancels a keyed
// call.
func TestNotificationsCancelledCancelsTheExecution(t *testing.T) {
	f := start(t)
	s := f.raw(t, tokenAgent)
	req := s.request("tools/call", map[string]any{"name": "gadget.ship", "arguments": map[string]any{"shop": "s1", "name": "g", "idempotencyKey": "ship-2"}})
	go func() {
		if resp, err := s.post(t.Context(), req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	id := f.waitStarted(t)
	resp, err := s.post(t.Context(), map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": map[string]any{"requestId": req["id"], "reason": "the user changed their mind"}})
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %v %v", err, resp)
	}
	resp.Body.Close()
	if r := f.shipReport(t); r.Code != idem.CodeCancelled {
		t.Fatalf("report %+v, want CANCELLED", r)
	}
	f.wantCancelledOnce(t, id)
}

// A dropped response stream cancels an unkeyed call (SPEC §7: the client
// disconnecting is the caller's cancellation of an unkeyed call).
func TestDroppedStreamCancelsAnUnkeyedCall(t *testing.T) {
	f := start(t)
	s := f.raw(t, tokenBrowser) // a browser may call without a key
	ctx, drop := context.WithCancel(t.Context())
	go func() {
		if resp, err := s.post(ctx, s.request("tools/call", map[string]any{"name": "gadget.ship", "arguments": map[string]any{"shop": "s1", "name": "g"}})); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	id := f.waitStarted(t)
	drop()
	if r := f.shipReport(t); r.Code != idem.CodeCancelled || r.Keyed {
		t.Fatalf("report %+v, want an unkeyed CANCELLED", r)
	}
	f.wantCancelledOnce(t, id)
}

// A keyed call stays detached from its stream (SPEC §7): after a dropped
// stream it finishes, and the same-key retry replays it.
func TestDroppedStreamLeavesAKeyedCallRunning(t *testing.T) {
	f := start(t)
	s := f.raw(t, tokenAgent)
	ctx, drop := context.WithCancel(t.Context())
	args := map[string]any{"shop": "s1", "name": "g", "idempotencyKey": "ship-3"}
	go func() {
		if resp, err := s.post(ctx, s.request("tools/call", map[string]any{"name": "gadget.ship", "arguments": args}), "X-Test-Watch", "1"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	id := f.waitStarted(t)
	drop()
	select { // the server saw the stream drop
	case <-f.streamEnded:
	case <-time.After(failAfter):
		t.Fatal("the server did not see the stream drop")
	}
	select {
	case f.release <- struct{}{}:
	case r := <-f.finished:
		t.Fatalf("the keyed call ended %+v when its stream dropped", r)
	}
	if r := f.shipReport(t); r.Code != "" || r.Status != 200 {
		t.Fatalf("report %+v, want success", r)
	}
	res := structured(t, call(t, f.connect(t, tokenAgent), "gadget.ship", args))
	if at(res, "meta.idempotency.replayed") != true || at(res, "meta.executionId") != id {
		t.Fatalf("retry after the dropped stream: %v", res)
	}
	if n := f.ships.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// /mcp answers a missing or unknown token exactly as the HTTP API does.
func TestUnauthenticatedIsTheHTTPProblem(t *testing.T) {
	f := start(t)
	send := func(method, path, token string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, f.url+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, token := range []string{"", "not-a-token"} {
		status, header, body := send("POST", "/mcp", token)
		wantStatus, wantHeader, wantBody := send("GET", "/v1/approvals", token)
		if status != 401 || status != wantStatus || body != wantBody || !strings.Contains(body, `"code":"UNAUTHENTICATED"`) ||
			header.Get("Content-Type") != wantHeader.Get("Content-Type") || header.Get("WWW-Authenticate") != wantHeader.Get("WWW-Authenticate") {
			t.Errorf("token %q: /mcp answered %d %v %s; the HTTP API %d %v %s", token, status, header, body, wantStatus, wantHeader, wantBody)
		}
	}
}

// A session stays with the principal that opened it.
func TestSessionStaysWithItsPrincipal(t *testing.T) {
	f := start(t)
	s := f.raw(t, tokenAgent)
	s.token = tokenBrowser
	resp, err := s.post(t.Context(), s.request("tools/list", map[string]any{}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another principal on the session: %d, want 403", resp.StatusCode)
	}
}

// Drain ends the standalone event streams so that shutdown need not wait
// for them.
func TestDrainEndsStandaloneStreams(t *testing.T) {
	f := start(t)
	s := f.raw(t, tokenAgent)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tokenAgent)
	req.Header.Set("Mcp-Session-Id", s.id)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET stream: %v %v", err, resp)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	f.handler.Drain()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("stream ended with %v", err)
		}
	case <-time.After(failAfter):
		t.Fatal("the stream did not end on Drain")
	}
}

// RemoteBackend (idem mcp) offers the same tools and gives the same
// results, over the HTTP API.
func TestRemoteBackendGivesTheSameToolsAndResults(t *testing.T) {
	f := start(t)
	remote := inMemory(t, mcpserver.NewRemoteBackend(f.url, tokenAgent, nil))
	local := f.connect(t, tokenAgent)
	want, err := local.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want.Tools)
	gotJSON, _ := json.Marshal(got.Tools)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("remote tools differ:\n%s\nwant\n%s", gotJSON, wantJSON)
	}

	args := map[string]any{"shop": "s3", "name": "r", "idempotencyKey": "r-1"}
	first := structured(t, call(t, remote, "gadget.create", args))
	if at(first, "meta.idempotency.replayed") != false || at(first, "data.name") != "r" {
		t.Fatalf("remote call: %v", first)
	}
	for _, cs := range []*mcp.ClientSession{remote, local} {
		again := structured(t, call(t, cs, "gadget.create", args))
		if at(again, "meta.idempotency.replayed") != true || at(again, "meta.executionId") != at(first, "meta.executionId") {
			t.Fatalf("not a replay of %v: %v", first, again)
		}
	}
	wantProblem(t, call(t, remote, "gadget.create", map[string]any{"shop": "s3", "name": "r"}), idem.CodeIdempotencyKeyRequired)
	dry := structured(t, call(t, remote, "gadget.bind", map[string]any{"shop": "s3", "name": "g", "environment": "production", "originUrl": "https://o.example", "dryRun": true}))
	if at(dry, "meta.dryRun") != true {
		t.Fatalf("remote dry run: %v", dry)
	}
	if n := f.creates.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}

	stranger := inMemory(t, mcpserver.NewRemoteBackend(f.url, "not-a-token", nil))
	wantProblem(t, call(t, stranger, "gadget.list", map[string]any{"shop": "s3"}), idem.CodeUnauthenticated)
}

// A call the remote server never answers is NETWORK_ERROR.
func TestRemoteBackendNetworkError(t *testing.T) {
	f := start(t)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/operations" {
			resp, err := http.Get(f.url + "/v1/operations")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(w, resp.Body)
			return
		}
		panic(http.ErrAbortHandler) // the connection drops without an answer
	}))
	t.Cleanup(flaky.Close)
	cs := inMemory(t, mcpserver.NewRemoteBackend(flaky.URL, tokenAgent, nil))
	p := wantProblem(t, call(t, cs, "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": "n-1"}), idem.CodeNetworkError)
	if p["status"] != 0.0 || p["retryable"] != true || at(p, "details.reconcile") != "gadget.list" {
		t.Fatalf("problem %v", p)
	}
}

// inMemory connects an SDK client to a server over b in memory.
func inMemory(t *testing.T, b mcpserver.Backend) *mcp.ClientSession {
	t.Helper()
	srv, err := mcpserver.New(t.Context(), b, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// A remote answer that is not an idem envelope or problem object (a
// proxy's page) is INTERNAL, saying so, whatever its status; a problem
// object passes through with its code.
func TestRemoteBackendBrokenAnswer(t *testing.T) {
	f := start(t)
	for _, tc := range []struct {
		status int
		body   string
		code   idem.Code
	}{
		{200, `<html>ok</html>`, idem.CodeInternal},
		{201, `null`, idem.CodeInternal},
		{502, `{"error":"bad gateway"}`, idem.CodeInternal},
		{503, `{"type":"urn:idem:error:STORE_UNAVAILABLE","title":"t","status":503,"detail":"down","code":"STORE_UNAVAILABLE","retryable":true}`, idem.CodeStoreUnavailable},
	} {
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/operations" {
				resp, err := http.Get(f.url + "/v1/operations")
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				_, _ = io.Copy(w, resp.Body)
				return
			}
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, tc.body)
		}))
		cs := inMemory(t, mcpserver.NewRemoteBackend(upstream.URL, tokenAgent, nil))
		p := wantProblem(t, call(t, cs, "gadget.list", map[string]any{"shop": "s1"}), tc.code)
		if tc.code == idem.CodeInternal && (p["detail"] != fmt.Sprintf("the server answered %d with a body that is not an idem envelope or problem object", tc.status) || p["meta"] != nil) {
			t.Errorf("%d %s: problem %v", tc.status, tc.body, p)
		}
		if tc.code != idem.CodeInternal && p["detail"] != "down" {
			t.Errorf("%d %s: problem %v", tc.status, tc.body, p)
		}
		upstream.Close()
	}
}
