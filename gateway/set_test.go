package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/gatewayconfig"
)

func config(t testing.TB, ups ...gatewayconfig.Upstream) *gatewayconfig.Config {
	t.Helper()
	c := &gatewayconfig.Config{Upstreams: ups}
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	return c
}

func names(ops []idem.Operation) []string {
	var out []string
	for _, op := range ops {
		out = append(out, op.Metadata().Name+" "+op.Metadata().Path)
	}
	return out
}

// TestSetNamesAndFilters: two upstreams, one prefixed and filtered, one
// not; their tools are served side by side, and a call reaches the
// upstream under its own tool name.
func TestSetNamesAndFilters(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	set := gateway.NewSet(gateway.SetOptions{})
	defer set.Close()
	d, err := set.Declare(t.Context(), config(t,
		gatewayconfig.Upstream{Name: "a", Kind: gatewayconfig.KindMCP, URL: a.url, Prefix: true, Include: []string{"add", "t*"}},
		gatewayconfig.Upstream{Name: "b", Kind: gatewayconfig.KindMCP, URL: b.url, Prefix: false, Exclude: []string{"slow", "fail", "reset", "total"}},
	))
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	want := []string{"a.add /tools/a.add", "a.total /tools/a.total", "add /tools/add"}
	if got := names(d.Operations); !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(d.OpenAPI, &doc); err != nil || doc.Paths["/tools/a.add"] == nil || doc.Paths["/tools/add"] == nil {
		t.Fatalf("the document: %v %s", err, d.OpenAPI)
	}
	for _, st := range set.States() {
		if st.State != "up" {
			t.Errorf("state %+v", st)
		}
	}
	if ups := set.Upstreams(); len(ups) != 2 || ups["a"] == nil || ups["b"] == nil {
		t.Errorf("Upstreams: %v", ups)
	}
}

// TestSetCollision: a name served by two upstreams is refused naming both.
func TestSetCollision(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	set := gateway.NewSet(gateway.SetOptions{})
	defer set.Close()
	_, err := set.Declare(t.Context(), config(t,
		gatewayconfig.Upstream{Name: "a", Kind: gatewayconfig.KindMCP, URL: a.url},
		gatewayconfig.Upstream{Name: "b", Kind: gatewayconfig.KindMCP, URL: b.url},
	))
	if err == nil || !strings.Contains(err.Error(), `the upstreams "a" and "b" both serve "add"`) {
		t.Fatalf("got %v", err)
	}
}

// TestSetDownAtStart: an upstream nobody answers is down, serves nothing
// and does not stop the others; once it answers, Changed fires and a new
// declaration serves its tools.
func TestSetDownAtStart(t *testing.T) {
	a := newUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	set := gateway.NewSet(gateway.SetOptions{Backoff: time.Second})
	defer set.Close()
	cfg := config(t,
		gatewayconfig.Upstream{Name: "a", Kind: gatewayconfig.KindMCP, URL: a.url, Prefix: true},
		gatewayconfig.Upstream{Name: "late", Kind: gatewayconfig.KindMCP, URL: "http://" + addr + "/mcp", Prefix: true,
			Timeouts: gatewayconfig.Timeouts{Connect: 2 * time.Second}},
	)
	d, err := set.Declare(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	for _, n := range names(d.Operations) {
		if strings.HasPrefix(n, "late.") {
			t.Fatalf("a down upstream serves %s", n)
		}
	}
	states := set.States()
	if states[1].Name != "late" || states[1].State != "down" || strings.Contains(states[1].Error, "key is free") {
		t.Fatalf("states: %+v", states)
	}
	// It comes up where it was said to be.
	late := newUpstream(t)
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	late.http.Close()
	late.serve(t, ln2)
	select {
	case <-set.Changed():
	case <-time.After(20 * time.Second):
		t.Fatal("no change signalled once the upstream answers")
	}
	d, err = set.Declare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	if !slices.Contains(names(d.Operations), "late.add /tools/late.add") {
		t.Fatalf("served %v", names(d.Operations))
	}
	if set.States()[1].State != "up" {
		t.Fatalf("states: %+v", set.States())
	}
}

// Issue 34 finding 3 (f-gwperf): in config mode, the progress an MCP
// member's upstream sends for a call reaches the caller that asked for
// it, under the caller's token, as with one --upstream
// (TestGatewayRelaysProgressAndUpdates).
func TestSetRelaysProgress(t *testing.T) {
	l := newLibrary(t)
	ctx := t.Context()
	_, d := declared(t, gateway.SetOptions{}, gatewayconfig.Upstream{Name: "lib", Kind: gatewayconfig.KindMCP, URL: l.url, Prefix: true})
	gw, _ := serveGateway(t, "", d.Operations, nil) // closed after the client's session (connect)
	progress := make(chan *mcp.ProgressNotificationParams, 10)
	cs := connect(t, gw, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { progress <- req.Params },
	})
	p := &mcp.CallToolParams{Name: "lib.count", Arguments: map[string]any{}}
	p.SetProgressToken("mine")
	done := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(ctx, p)
		if err == nil && res.IsError {
			err = fmt.Errorf("lib.count: %+v", res)
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
		case err := <-done:
			t.Fatalf("the call ended before progress %d: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("progress %d never came", i)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// setOn serves the declaration of a Set of the one upstream u on the
// SQLite store db; the server's URL.
func setOn(t *testing.T, db string, u gatewayconfig.Upstream) string {
	t.Helper()
	_, d := declared(t, gateway.SetOptions{}, u)
	gw, _ := serveGateway(t, db, d.Operations, nil)
	return gw
}

// TestSetsInFrontOfTwoUpstreamsShareNoKeys: two gateways on one store,
// each a Set (the code of idem gateway --config and of its one-upstream
// flags) in front of its own upstream, a tool of one name served
// unprefixed: the same key and arguments through the second is not the
// first's record but a reuse (422), and its upstream runs nothing.
// Records are scoped by the upstream's name (mcp:<name>), or by its URL
// for the one-upstream flags (SPEC §6.2). Before, a Set's operations had
// no target, and the second gateway replayed the first's result.
func TestSetsInFrontOfTwoUpstreamsShareNoKeys(t *testing.T) {
	contracts := filepath.Join(t.TempDir(), "contracts.yaml")
	if err := os.WriteFile(contracts, []byte("add:\n  kind: same_key_replay\n  reconcile: total\n  rationale: Replays by key.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, anonymous := range []bool{false, true} {
		t.Run(fmt.Sprintf("anonymous=%v", anonymous), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "idem.db")
			a, b := newRawUpstream(t), newRawUpstream(t)
			nameA, nameB := "alpha", "beta"
			if anonymous {
				// Both the one-upstream flags' "upstream": only the URL tells them apart.
				nameA, nameB = "upstream", "upstream"
			}
			gwA := setOn(t, db, gatewayconfig.Upstream{Name: nameA, Anonymous: anonymous, Kind: gatewayconfig.KindMCP, URL: a.url, Contracts: contracts})
			gwB := setOn(t, db, gatewayconfig.Upstream{Name: nameB, Anonymous: anonymous, Kind: gatewayconfig.KindMCP, URL: b.url, Contracts: contracts})
			if status, body := post(t, gwA, "add", "shared-1", `{"n":1}`); status != http.StatusOK {
				t.Fatalf("through A: %d %s", status, body)
			}
			status, body := post(t, gwB, "add", "shared-1", `{"n":1}`)
			if status != http.StatusUnprocessableEntity || !strings.Contains(body, "IDEMPOTENCY_KEY_REUSED") {
				t.Fatalf("the same key through B: %d %s (B's upstream ran %d calls)", status, body, b.calls.Load())
			}
			if b.calls.Load() != 0 || a.calls.Load() != 1 {
				t.Fatalf("calls: A %d, B %d", a.calls.Load(), b.calls.Load())
			}
		})
	}
}

// TestSetListsAnUpstreamOnceOnConnect: a member that has just connected
// (its tools listed to see that it answers) is declared from that list,
// not listed again; a later declaration (a reload: list_changed, the
// interval, the config) lists it anew, and serves what it lists.
func TestSetListsAnUpstreamOnceOnConnect(t *testing.T) {
	a := newUpstream(t)
	var listings atomic.Int64 // tools/list of a first page: one whole listing
	a.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && method == "tools/list" && p.Cursor == "" {
				listings.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	set := gateway.NewSet(gateway.SetOptions{})
	defer set.Close()
	cfg := config(t, gatewayconfig.Upstream{Name: "a", Kind: gatewayconfig.KindMCP, URL: a.url, Prefix: true})
	d, err := set.Declare(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	if n := listings.Load(); n != 1 {
		t.Fatalf("the upstream got %d tools/list listings on connect, want 1", n)
	}
	a.srv.AddTool(&mcp.Tool{Name: "extra", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	d, err = set.Declare(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	if n := listings.Load(); n != 2 {
		t.Fatalf("the upstream got %d tools/list listings after a second declaration, want 2", n)
	}
	if got := names(d.Operations); !slices.Contains(got, "a.extra /tools/a.extra") {
		t.Fatalf("the second declaration serves %v, without the tool added since", got)
	}
}

// TestSetListsAgainWhenTheToolsChangedAfterConnecting: an upstream down
// at start connects (its tools listed), then says its tools changed
// before the set declares again: that declaration lists it anew rather
// than serve the list read on connecting.
func TestSetListsAgainWhenTheToolsChangedAfterConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	set := gateway.NewSet(gateway.SetOptions{Backoff: time.Second})
	defer set.Close()
	cfg := config(t, gatewayconfig.Upstream{Name: "late", Kind: gatewayconfig.KindMCP, URL: "http://" + addr + "/mcp", Prefix: true,
		Timeouts: gatewayconfig.Timeouts{Connect: 2 * time.Second}})
	d, err := set.Declare(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	late := newUpstream(t)
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	late.http.Close()
	late.serve(t, ln2)
	changed := func(what string) {
		t.Helper()
		select {
		case <-set.Changed():
		case <-time.After(20 * time.Second):
			t.Fatalf("no change signalled once %s", what)
		}
	}
	changed("the upstream answers") // connected, its tools listed
	late.srv.AddTool(&mcp.Tool{Name: "extra", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	changed("the upstream's tools changed") // its tools/list_changed
	d, err = set.Declare(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	if got := names(d.Operations); !slices.Contains(got, "late.extra /tools/late.extra") {
		t.Fatalf("served %v, without the tool added after connecting", got)
	}
}
