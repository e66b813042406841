package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

// failAfter bounds the waits for an event that must come.
const failAfter = 30 * time.Second

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// The server under test: a few operations of every annotation and contract
// kind on a real Runner and SQLite store, behind one HTTP server that
// serves the HTTP API at / and MCP at /mcp, as idem serve does.

type gadgetIn struct {
	Shop string `json:"shop" in:"path" jsonschema:"pattern=^[a-z0-9-]+$"`
	Name string `json:"name" jsonschema:"minLength=1"`
}

type gadgetRef struct {
	Shop string `json:"shop" in:"path"`
	Name string `json:"name" in:"path"`
}

type shopIn struct {
	Shop string `json:"shop" in:"path"`
}

type bindIn struct {
	Shop        string `json:"shop" in:"path"`
	Name        string `json:"name" in:"path"`
	Environment string `json:"environment" in:"query" jsonschema:"enum=preview,enum=production"`
	OriginURL   string `json:"originUrl"`
}

type gadget struct {
	Shop string `json:"shop"`
	Name string `json:"name"`
}

const (
	tokenAgent    = "t-agent"
	tokenBrowser  = "t-browser"
	tokenApprover = "t-approver"
)

var approver = idem.Principal{Org: "acme", ID: "bob", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}}

// fixture is one running server.
type fixture struct {
	url     string
	runner  *pipeline.Runner
	handler *mcpserver.HTTPHandler
	// creates and ships count handler invocations.
	creates atomic.Int64
	ships   atomic.Int64
	// started receives the execution id of every gadget.ship attempt;
	// release lets a blocked one finish.
	started chan string
	release chan struct{}
	// finished receives a report per finished call.
	finished chan pipeline.Report
	// streamEnded is told when the server sees the end of a request sent
	// with the header X-Test-Watch.
	streamEnded chan struct{}
}

func operations(f *fixture) []idem.Operation {
	create := idem.Define(idem.Metadata{
		Name: "gadget.create", Method: "POST", Path: "/v1/shops/{shop}/gadgets", Summary: "Create a gadget in a shop.",
		SideEffect: idem.SideEffectWrite, SuccessStatus: 201,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "gadget.list", Rationale: "Creating twice would make two gadgets; the key makes a retry replay the first answer."},
	}, func(ctx context.Context, call *idem.Call, in gadgetIn) (gadget, error) {
		f.creates.Add(1)
		return gadget{Shop: in.Shop, Name: in.Name}, nil
	})
	list := idem.Define(idem.Metadata{
		Name: "gadget.list", Method: "GET", Path: "/v1/shops/{shop}/gadgets", Summary: "List a shop's gadgets.",
		SideEffect: idem.SideEffectRead, Retry: idem.RetryContract{Rationale: "A read of current state."},
	}, func(ctx context.Context, call *idem.Call, in shopIn) ([]gadget, error) {
		return []gadget{}, nil
	})
	bind := idem.Define(idem.Metadata{
		Name: "gadget.bind", Method: "PUT", Path: "/v1/shops/{shop}/gadgets/{name}/backend", Summary: "Bind a gadget's backend in one environment.",
		SideEffect: idem.SideEffectWrite,
		Retry:      idem.RetryContract{Kind: idem.RetryConvergent, Reconcile: "gadget.list", Preview: true, Rationale: "A desired-state write; reconcile before repeating."},
	}, func(ctx context.Context, call *idem.Call, in bindIn) (bindIn, error) {
		return in, nil
	}).WithPreview(func(ctx context.Context, call *idem.Call, in bindIn) (any, error) {
		return map[string]string{"wouldBind": in.OriginURL}, nil
	})
	scrap := idem.Define(idem.Metadata{
		Name: "gadget.scrap", Method: "DELETE", Path: "/v1/shops/{shop}/gadgets/{name}", Summary: "Scrap a gadget.",
		SideEffect: idem.SideEffectDestructive,
		Retry:      idem.RetryContract{Kind: idem.RetryIntrinsicReplay, Reconcile: "gadget.list", Rationale: "Scrapping a scrapped gadget changes nothing."},
	}, func(ctx context.Context, call *idem.Call, in gadgetRef) (gadget, error) {
		return gadget(in), nil
	})
	ship := idem.Define(idem.Metadata{
		Name: "gadget.ship", Method: "POST", Path: "/v1/shops/{shop}/gadgets/{name}/ship", Summary: "Ship a gadget through the carrier.",
		SideEffect: idem.SideEffectExternal, Idempotent: true, RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 2, BackoffMs: 1},
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "gadget.list", Rationale: "A shipment leaves the building once; the carrier deduplicates on the key."},
	}, func(ctx context.Context, call *idem.Call, in gadgetRef) (gadget, error) {
		f.ships.Add(1)
		f.started <- call.ExecutionID
		select {
		case <-f.release:
			if ctx.Err() != nil { // cancelled while being released
				return gadget{}, ctx.Err()
			}
			return gadget(in), nil
		case <-ctx.Done():
			return gadget{}, ctx.Err()
		}
	})
	token := idem.Define(idem.Metadata{
		Name: "gadget.token", Method: "POST", Path: "/v1/shops/{shop}/tokens", Summary: "Issue a short-lived token for a shop.",
		SideEffect: idem.SideEffectWrite, Retry: idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: "A token is a point-in-time answer."},
	}, func(ctx context.Context, call *idem.Call, in shopIn) (map[string]string, error) {
		return map[string]string{"token": "tk_" + call.ExecutionID}, nil
	})
	audit := idem.Define(idem.Metadata{
		Name: "gadget.audit", Method: "GET", Path: "/v1/shops/{shop}/audit", Summary: "Read a shop's audit log (HTTP only).",
		SideEffect: idem.SideEffectRead, Surfaces: []idem.Surface{idem.SurfaceHTTP, idem.SurfaceCLI},
	}, func(ctx context.Context, call *idem.Call, in shopIn) ([]string, error) {
		return []string{}, nil
	})
	return []idem.Operation{create, list, bind, scrap, ship, token, audit}
}

// start starts the server; configure may change its runner's config.
func start(t *testing.T, configure ...func(*pipeline.Config)) *fixture {
	t.Helper()
	f := &fixture{started: make(chan string, 8), release: make(chan struct{}), finished: make(chan pipeline.Report, 64), streamEnded: make(chan struct{}, 1)}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg, err := idem.NewRegistry(operations(f)...)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, _ := secretbox.New(key)
	quiet := slog.New(slog.DiscardHandler)
	cfg := pipeline.Config{Store: store, Sealer: box, Logger: quiet, Observe: func(r pipeline.Report) {
		select {
		case f.finished <- r:
		default:
		}
	}}
	for _, c := range configure {
		c(&cfg)
	}
	f.runner, err = pipeline.New(reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := httpapi.NewTokens(map[string]idem.Principal{
		tokenAgent:    {Org: "acme", ID: "agent-1", Kind: idem.KindAgent},
		tokenBrowser:  {Org: "acme", ID: "alice", Kind: idem.KindBrowser},
		tokenApprover: approver,
	})
	srv, err := mcpserver.New(t.Context(), mcpserver.RunnerBackend{Runner: f.runner}, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f.handler = mcpserver.Handler(srv, tokens, mcpserver.HTTPOptions{})
	mux := http.NewServeMux()
	watched := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Watch") != "" {
			context.AfterFunc(r.Context(), func() { f.streamEnded <- struct{}{} })
		}
		f.handler.ServeHTTP(w, r)
	})
	mux.Handle("/mcp", watched)
	mux.Handle("/mcp/", watched)
	mux.Handle("/", httpapi.NewHandler(httpapi.Config{Runner: f.runner, Store: store, Auth: tokens, Logger: quiet, Version: "test"}))
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(f.release) // let blocked handlers end
		ts.CloseClientConnections()
		ts.Close()
	})
	f.url = ts.URL
	return f
}

// report waits for the next finished call.
func (f *fixture) report(t *testing.T) pipeline.Report {
	t.Helper()
	select {
	case r := <-f.finished:
		return r
	case <-time.After(failAfter):
		t.Fatal("no call finished")
		return pipeline.Report{}
	}
}

// waitStarted waits for a gadget.ship attempt to start and returns its
// execution id.
func (f *fixture) waitStarted(t *testing.T) string {
	t.Helper()
	select {
	case id := <-f.started:
		return id
	case <-time.After(failAfter):
		t.Fatal("gadget.ship did not start")
		return ""
	}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect opens an SDK client session to /mcp as token.
func (f *fixture) connect(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   f.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}},
	}
	cs, err := client.Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and fails the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// structured returns a result's structuredContent as a JSON object.
func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("structuredContent %s is not an object", raw)
	}
	return out
}

// text returns a result's one text content.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("content has %d items, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	return tc.Text
}

// at reads a value at a dotted path ("meta.idempotency.replayed").
func at(v any, path string) any {
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	return v
}

// wantProblem fails unless res is an error result with code.
func wantProblem(t *testing.T, res *mcp.CallToolResult, code idem.Code) map[string]any {
	t.Helper()
	body := structured(t, res)
	if !res.IsError || body["code"] != string(code) {
		t.Fatalf("got isError %v, structuredContent %v; want isError with %s", res.IsError, body, code)
	}
	if want := string(code) + ": " + body["detail"].(string); text(t, res) != want {
		t.Fatalf("text content %q, want %q", text(t, res), want)
	}
	return body
}

// rawSession speaks JSON-RPC over streamable HTTP by hand, to see the wire
// and to control the connection.
type rawSession struct {
	t     *testing.T
	url   string
	token string
	id    string
	next  atomic.Int64
}

func (f *fixture) raw(t *testing.T, token string) *rawSession {
	t.Helper()
	s := &rawSession{t: t, url: f.url + "/mcp", token: token}
	resp, err := s.post(t.Context(), s.request("initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	s.id = resp.Header.Get("Mcp-Session-Id")
	if _, err := readAnswer(resp); err != nil || s.id == "" {
		t.Fatalf("initialize: %v (session %q)", err, s.id)
	}
	resp, err = s.post(t.Context(), map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %v %v", err, resp)
	}
	resp.Body.Close()
	return s
}

// request returns a JSON-RPC request with the next id.
func (s *rawSession) request(method string, params any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": s.next.Add(1), "method": method, "params": params}
}

// post sends one message on ctx; headers alternate name and value.
func (s *rawSession) post(ctx context.Context, msg any, headers ...string) (*http.Response, error) {
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return http.DefaultClient.Do(req)
}

// call sends a request and returns its raw JSON-RPC response message.
func (s *rawSession) call(method string, params any) json.RawMessage {
	s.t.Helper()
	resp, err := s.post(s.t.Context(), s.request(method, params))
	if err != nil {
		s.t.Fatal(err)
	}
	msg, err := readAnswer(resp)
	if err != nil {
		s.t.Fatalf("%s: %v", method, err)
	}
	return msg
}

// readAnswer reads the JSON-RPC response from an event stream.
func readAnswer(resp *http.Response) (json.RawMessage, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal([]byte(data), &m) == nil && m.ID != nil {
			return json.RawMessage(data), nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("the stream ended without a response")
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./mcpserver -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the golden file (go test ./mcpserver -update rewrites it); got:\n%s", path, got)
	}
}
