package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

// mcpTestServer is an HTTP API with one same-key operation, for idem mcp
// to forward to.
func mcpTestServer(t *testing.T) (url string, runs *atomic.Int64) {
	t.Helper()
	runs = new(atomic.Int64)
	type noteIn struct {
		Book string `json:"book" in:"path"`
		Text string `json:"text"`
	}
	note := idem.Define(idem.Metadata{
		Name: "note.add", Method: "POST", Path: "/v1/books/{book}/notes", Summary: "Add a note to a book.", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "note.list", Rationale: "Adding twice adds two notes."},
	}, func(ctx context.Context, call *idem.Call, in noteIn) (noteIn, error) {
		runs.Add(1)
		return in, nil
	})
	list := idem.Define(idem.Metadata{Name: "note.list", Method: "GET", Path: "/v1/books/{book}/notes", Summary: "List a book's notes.", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in struct {
			Book string `json:"book" in:"path"`
		}) ([]string, error) {
			return []string{}, nil
		})
	ts := httptest.NewServer(mcpTestHandler(t, note, list))
	t.Cleanup(ts.Close)
	return ts.URL, runs
}

// mcpTestHandler is the HTTP API of ops on a store of its own, with the
// token t-agent.
func mcpTestHandler(t *testing.T, ops ...idem.Operation) http.Handler {
	t.Helper()
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tokens := httpapi.NewTokens(map[string]idem.Principal{"t-agent": {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	return httpapi.NewHandler(httpapi.Config{Runner: runner, Store: store, Auth: tokens, Logger: quiet})
}

// TestMCPAnnouncesChangedTools: the bridge advertises listChanged, so it
// must send it: a tool added on the server reaches the client with
// notifications/tools/list_changed, and no notification comes while
// nothing changes.
func TestMCPAnnouncesChangedTools(t *testing.T) {
	read := func(name string) idem.Operation {
		return idem.Define(idem.Metadata{Name: name, Method: "GET", Path: "/v1/" + name, Summary: "Read " + name + ".", SideEffect: idem.SideEffectRead},
			func(context.Context, *idem.Call, struct{}) (string, error) { return name, nil })
	}
	var current atomic.Pointer[http.Handler]
	first := mcpTestHandler(t, read("a.get"))
	current.Store(&first)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)

	changed := make(chan struct{}, 8)
	cs, done := mcpConnectWith(t, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }},
		nil, "--server", ts.URL, "--token", "t-agent", "--refresh-interval", "20ms")
	if caps := cs.InitializeResult().Capabilities; caps.Tools == nil || !caps.Tools.ListChanged {
		t.Fatalf("capabilities %+v: want tools.listChanged", caps)
	}
	select {
	case <-changed:
		t.Fatal("list_changed while nothing changed")
	case <-time.After(300 * time.Millisecond): // 15 reads of an unchanged catalog
	}
	second := mcpTestHandler(t, read("a.get"), read("b.get"))
	current.Store(&second)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no list_changed after the server's tools changed")
	}
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(list.Tools) != 2 || list.Tools[1].Name != "b.get" {
		t.Fatalf("tools/list after the change = %v, %v", list, err)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "b.get"})
	if err != nil || res.IsError {
		t.Fatalf("the new tool: %v, %v", res, err)
	}
	cs.Close()
	if got := <-done; !strings.HasPrefix(got, "0 ") {
		t.Fatalf("idem mcp ended with %q", got)
	}
}

// mcpConnect runs idem mcp with env and connects an SDK client to its
// stdin and stdout. Closing the session ends the command, whose exit code
// and stderr come on the returned channel.
func mcpConnect(t *testing.T, env map[string]string, args ...string) (*mcp.ClientSession, <-chan string) {
	t.Helper()
	return mcpConnectWith(t, nil, env, args...)
}

// mcpConnectWith is mcpConnect with the client's options.
func mcpConnectWith(t *testing.T, opts *mcp.ClientOptions, env map[string]string, args ...string) (*mcp.ClientSession, <-chan string) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	done := make(chan string, 1)
	go func() {
		m := Main{Stdin: inR, Stdout: outW, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}
		code := m.Run(context.Background(), append([]string{"mcp"}, args...))
		outW.Close()
		done <- fmt.Sprintf("%d %s", code, stderr.String())
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	cs, err := client.Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect: %v (idem mcp: %s)", err, <-done)
	}
	return cs, done
}

func TestMCPForwardsToTheServer(t *testing.T) {
	url, runs := mcpTestServer(t)
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
	}{
		"flags":       {nil, []string{"--server", url, "--token", "t-agent"}},
		"environment": {map[string]string{"IDEM_SERVER": url, "IDEM_TOKEN": "t-agent"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			cs, done := mcpConnect(t, tc.env, tc.args...)
			list, err := cs.ListTools(t.Context(), nil)
			if err != nil || len(list.Tools) != 2 || list.Tools[0].Name != "note.add" || list.Tools[1].Name != "note.list" {
				t.Fatalf("tools/list = %v, %v", list, err)
			}
			key := "k-" + name
			args := map[string]any{"book": "b1", "text": "hello", "idempotencyKey": key}
			var answers []map[string]any
			for range 2 {
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "note.add", Arguments: args})
				if err != nil || res.IsError {
					t.Fatalf("call: %v %v", res, err)
				}
				raw, _ := json.Marshal(res.StructuredContent)
				var env map[string]any
				_ = json.Unmarshal(raw, &env)
				answers = append(answers, env)
			}
			first, second := answers[0]["meta"].(map[string]any), answers[1]["meta"].(map[string]any)
			if first["idempotency"].(map[string]any)["replayed"] != false || second["idempotency"].(map[string]any)["replayed"] != true ||
				first["executionId"] != second["executionId"] {
				t.Fatalf("answers %v", answers)
			}
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "note.add", Arguments: map[string]any{"book": "b1", "text": "x"}})
			if err != nil || !res.IsError || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "IDEMPOTENCY_KEY_REQUIRED: ") {
				t.Fatalf("call without a key: %v %v", res, err)
			}
			cs.Close()
			if got := <-done; !strings.HasPrefix(got, "0 ") {
				t.Fatalf("idem mcp ended with %q after the client closed", got)
			}
		})
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2", n)
	}
}

func TestMCPUsageAndUnreachableServer(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"mcp", "extra"}, exitUsage, "unknown command"},
		{[]string{"mcp", "--no-such-flag"}, exitUsage, "unknown flag"},
		{[]string{"mcp", "--server", "ftp://example.com"}, exitUsage, "not an http:// or https:// URL"},
		{[]string{"mcp", "--server", "http://127.0.0.1:1"}, exitError, "read the catalog"},
	} {
		code, stdout, stderr := run(t, nil, tc.args...)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.err) {
			t.Errorf("idem %v = exit %d, stdout %q, stderr %q; want exit %d with %q", tc.args, code, stdout, stderr, tc.code, tc.err)
		}
	}
}
