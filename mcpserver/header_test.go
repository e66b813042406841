package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

type noteIn struct {
	Tenant   string `json:"tenant" in:"header" header:"X-Tenant"`
	Priority int    `json:"priority,omitempty" in:"header" header:"X-Priority"`
	Text     string `json:"text"`
}

// TestHeaderInputIsAnArgumentOverMCP: over MCP a header input is the flat
// argument of its JSON name, and the call is the intent of the HTTP call
// with the header (SPEC §10.2): a key used over MCP replays over HTTP, and
// another header value under that key is a reuse on either surface.
func TestHeaderInputIsAnArgumentOverMCP(t *testing.T) {
	var runs int
	add := idem.Define(idem.Metadata{
		Name: "note.add", Method: "POST", Path: "/v1/notes", Summary: "Add a note", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "note.list", Rationale: "r"},
	}, func(ctx context.Context, call *idem.Call, in noteIn) (noteIn, error) {
		runs++
		return in, nil
	})
	list := idem.Define(idem.Metadata{Name: "note.list", Method: "GET", Path: "/v1/notes", Summary: "List notes", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in struct{}) ([]noteIn, error) { return []noteIn{}, nil })
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg, err := idem.NewRegistry(add, list)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tokens := httpapi.NewTokens(map[string]idem.Principal{tokenAgent: {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	srv, err := mcpserver.New(t.Context(), mcpserver.RunnerBackend{Runner: runner}, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.Handler(srv, tokens, mcpserver.HTTPOptions{}))
	mux.Handle("/", httpapi.NewHandler(httpapi.Config{Runner: runner, Store: store, Auth: tokens, Logger: quiet, Version: "test"}))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	f := &fixture{url: ts.URL}
	cs := f.connect(t, tokenAgent)

	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name != "note.add" {
			continue
		}
		raw, _ := json.Marshal(tool.InputSchema)
		if !strings.Contains(string(raw), `"tenant"`) || !strings.Contains(string(raw), `"priority"`) {
			t.Fatalf("the tool's input schema lacks the header arguments: %s", raw)
		}
	}

	res := call(t, cs, "note.add", map[string]any{"tenant": "acme", "priority": 2, "text": "hi", "idempotencyKey": "k-mcp"})
	body := structured(t, res)
	if res.IsError || at(body, "data.tenant") != "acme" || at(body, "data.priority") != float64(2) {
		t.Fatalf("over MCP the handler saw %v", body)
	}
	execID := at(body, "meta.executionId")

	post := func(key string, header map[string]string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/notes", strings.NewReader(`{"text":"hi"}`))
		req.Header.Set("Authorization", "Bearer "+tokenAgent)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	status, out := post("k-mcp", map[string]string{"x-tenant": "acme", "X-Priority": "2"})
	if status != 200 || at(out, "meta.idempotency.replayed") != true || at(out, "meta.executionId") != execID {
		t.Fatalf("the HTTP call with the headers did not replay the MCP call %v: %d %v", execID, status, out)
	}
	if status, out := post("k-mcp", map[string]string{"X-Tenant": "globex", "X-Priority": "2"}); status != 422 || out["code"] != string(idem.CodeIdempotencyKeyReused) {
		t.Fatalf("another X-Tenant under the key: %d %v", status, out)
	}
	wantProblem(t, call(t, cs, "note.add", map[string]any{"tenant": "globex", "priority": 2, "text": "hi", "idempotencyKey": "k-mcp"}), idem.CodeIdempotencyKeyReused)
	// And the reverse: a key used over HTTP replays over MCP.
	if status, _ := post("k-http", map[string]string{"X-Tenant": "acme"}); status != 200 {
		t.Fatalf("HTTP call: %d", status)
	}
	res = call(t, cs, "note.add", map[string]any{"tenant": "acme", "text": "hi", "idempotencyKey": "k-http"})
	if body := structured(t, res); res.IsError || at(body, "meta.idempotency.replayed") != true {
		t.Fatalf("the MCP call did not replay the HTTP call: %v", body)
	}
	if runs != 2 {
		t.Fatalf("the handler ran %d times, want 2", runs)
	}
	// The bridge to a remote server (idem mcp) sends the argument as the
	// header, as the catalog's x-idem-header says.
	remote := mcpserver.NewRemoteBackend(ts.URL, tokenAgent, nil)
	if _, err := remote.Descriptors(t.Context()); err != nil {
		t.Fatal(err)
	}
	rres, err := remote.Call(t.Context(), "note.add", map[string]json.RawMessage{"tenant": json.RawMessage(`"acme"`), "priority": json.RawMessage(`2`), "text": json.RawMessage(`"hi"`)}, "k-mcp", false)
	if err != nil || rres.Problem != nil || !rres.Meta.Idempotency.Replayed {
		t.Fatalf("the remote backend's call did not replay the MCP call: %v %s", err, rres.Body())
	}
	// A missing required header argument names the argument and its header.
	p := wantProblem(t, call(t, cs, "note.add", map[string]any{"text": "hi", "idempotencyKey": "k-none"}), idem.CodeInvalidInput)
	if !strings.Contains(p["detail"].(string), "header X-Tenant is required (the argument tenant)") {
		t.Fatalf("detail %q", p["detail"])
	}
}
