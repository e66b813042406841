package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/gatewayconfig"
	"github.com/idem-run/idem/mcpserver"
)

// relayHTTPUpstream serves gateway.RelayUpstreamForTest over streamable
// HTTP; its URL.
func relayHTTPUpstream(t *testing.T) string {
	t.Helper()
	srv := gateway.RelayUpstreamForTest(false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

// relayStdioUpstream is gateway.RelayUpstreamForTest spawned over stdio
// (this test binary, TestMain), on MCP 2025-11-25 at most when legacy.
func relayStdioUpstream(t *testing.T, legacy bool) gatewayconfig.Upstream {
	version := "latest"
	if legacy {
		version = "legacy"
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return gatewayconfig.Upstream{Name: "relay", Kind: gatewayconfig.KindMCP, Command: []string{self},
		Env: map[string]string{gateway.RelayUpstreamEnv: version}}
}

// relayDirect is a gateway with one upstream at url, dialled and built
// without a Set.
func relayDirect(t *testing.T, url string) string {
	t.Helper()
	up := dial(t, gateway.UpstreamConfig{URL: url})
	gw, _ := serveGateway(t, "", build(t, up, nil), up.Forwarder(""))
	return gw
}

// relaySet is a gateway over a config of the one upstream u.
func relaySet(t *testing.T, u gatewayconfig.Upstream) string {
	t.Helper()
	set, d := declared(t, gateway.SetOptions{Environ: os.Environ()}, u)
	gw, _ := serveGateway(t, "", d.Operations, set.Forwarder())
	return gw
}

// peer is a downstream client's record of what reached it.
type peer struct {
	name    string
	sampled chan string // the questions it was asked
	logs    chan *mcp.LoggingMessageParams
}

// options are the client options of a peer that declares sampling and
// elicitation and takes log messages.
func (p *peer) options() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			q := req.Params.Messages[0].Content.(*mcp.TextContent).Text
			p.sampled <- q
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: p.name + " answers " + q}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) { p.logs <- req.Params },
	}
}

func newPeer(name string) *peer {
	return &peer{name: name, sampled: make(chan string, 100), logs: make(chan *mcp.LoggingMessageParams, 100)}
}

// textOf is the text of a tool result's first content, or what went
// wrong.
func textOf(res *mcp.CallToolResult, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	if len(res.Content) == 0 {
		return "no content"
	}
	if text, ok := res.Content[0].(*mcp.TextContent); ok {
		return text.Text
	}
	return fmt.Sprintf("content %T", res.Content[0])
}

// awaitLog is the next log message p got.
func (p *peer) awaitLog(t *testing.T) *mcp.LoggingMessageParams {
	t.Helper()
	select {
	case m := <-p.logs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("%s got no log message", p.name)
		return nil
	}
}

// relayModes are the gateways of the relay tests: one HTTP upstream
// dialled alone, one in a config (prefixed), one spawned over stdio in a
// config (unprefixed); prefix is what its tools' names start with.
func relayModes(t *testing.T) []struct {
	name, prefix string
	start        func(t *testing.T) string
} {
	return []struct {
		name, prefix string
		start        func(t *testing.T) string
	}{
		{"http", "", func(t *testing.T) string { return relayDirect(t, relayHTTPUpstream(t)) }},
		{"config-http", "relay.", func(t *testing.T) string {
			return relaySet(t, gatewayconfig.Upstream{Name: "relay", Kind: gatewayconfig.KindMCP, URL: relayHTTPUpstream(t), Prefix: true})
		}},
		{"config-stdio", "", func(t *testing.T) string { return relaySet(t, relayStdioUpstream(t, true)) }},
		{"config-stdio-2026", "", func(t *testing.T) string { return relaySet(t, relayStdioUpstream(t, false)) }},
	}
}

// Issue 34 item 4: an upstream's sampling and elicitation requests during
// a tool call reach the client of that call, whose answers the tool gets;
// a client that did not declare the capability, or a call over HTTP, is
// refused with a reason the upstream reads; the call's log messages reach
// its client at the level it set, without idem's tag (or an upstream's
// forged one).
func TestGatewayRelaysSamplingElicitationAndLogging(t *testing.T) {
	for _, mode := range relayModes(t) {
		t.Run(mode.name, func(t *testing.T) {
			url := mode.start(t)
			ctx := t.Context()
			a := newPeer("A")
			csA := connect(t, url, a.options())
			got := textOf(csA.CallTool(ctx, &mcp.CallToolParams{Name: mode.prefix + "ask", Arguments: map[string]any{"q": "hello"}}))
			if got != "sampled: A answers hello" {
				t.Fatalf("ask: %q", got)
			}
			if q := <-a.sampled; q != "hello" {
				t.Fatalf("A was asked %q", q)
			}
			got = textOf(csA.CallTool(ctx, &mcp.CallToolParams{Name: mode.prefix + "confirm", Arguments: map[string]any{"q": "sure?"}}))
			if got != `elicited: accept {"ok":true}` {
				t.Fatalf("confirm: %q", got)
			}

			// A client that declared neither.
			csB := connect(t, url, nil)
			got = textOf(csB.CallTool(ctx, &mcp.CallToolParams{Name: mode.prefix + "ask", Arguments: map[string]any{"q": "hello"}}))
			// Refused: the upstream reads why (on 2026-07-28 the call
			// fails, saying why).
			if !strings.Contains(got, "the client calling through idem gateway did not declare sampling") {
				t.Fatalf("ask without sampling: %q", got)
			}
			got = textOf(csB.CallTool(ctx, &mcp.CallToolParams{Name: mode.prefix + "confirm", Arguments: map[string]any{"q": "sure?"}}))
			if !strings.Contains(got, "the client calling through idem gateway did not declare elicitation") {
				t.Fatalf("confirm without elicitation: %q", got)
			}

			// A call over HTTP has no client to ask.
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/tools/"+mode.prefix+"ask", strings.NewReader(`{"q":"hello"}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := bearer{}.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// The upstream's tool says why (on 2026-07-28 the problem does).
			if !strings.Contains(string(body), "the tool call came over idem's HTTP API") {
				t.Fatalf("ask over HTTP: %s %s", resp.Status, body)
			}

			// Logging, at the level A set.
			if err := csA.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
				t.Fatal(err)
			}
			if got := textOf(csA.CallTool(ctx, &mcp.CallToolParams{Name: mode.prefix + "chat", Arguments: map[string]any{"q": "hi"}})); got != "logged" {
				t.Fatalf("chat: %q", got)
			}
			m := a.awaitLog(t)
			if m.Data != "hi" || m.Level != "info" || m.Logger != "relay" {
				t.Fatalf("A's log message: %+v", m)
			}
			for k := range m.Meta {
				if strings.HasPrefix(k, "io.idem/") {
					t.Fatalf("A's log message carries %s: %+v", k, m.Meta)
				}
			}
			select {
			case m := <-a.logs:
				t.Fatalf("A got a message under its level: %+v", m)
			default:
			}
		})
	}
}

// Two clients call the same tool of the one upstream session at once:
// each is asked only its own question and gets only its own log
// messages, never the other's. Over stdio, where there is no stream per
// call, two calls in flight make a request belong to neither: refused.
func TestGatewayRelaysToTheCallingClientOnly(t *testing.T) {
	for _, mode := range relayModes(t) {
		t.Run(mode.name, func(t *testing.T) {
			url := mode.start(t)
			ctx := t.Context()
			peers := []*peer{newPeer("A"), newPeer("B")}
			sessions := make([]*mcp.ClientSession, len(peers))
			for i, p := range peers {
				sessions[i] = connect(t, url, p.options())
				if err := sessions[i].SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
					t.Fatal(err)
				}
			}
			for _, tool := range []string{"ask", "chat"} {
				answers := make([]string, len(peers))
				var wg sync.WaitGroup
				for i, p := range peers {
					wg.Go(func() {
						res, err := sessions[i].CallTool(ctx, &mcp.CallToolParams{Name: mode.prefix + tool,
							Arguments: map[string]any{"q": "from " + p.name, "wait": len(peers)}})
						answers[i] = textOf(res, err)
					})
				}
				wg.Wait()
				for i, p := range peers {
					stdio := strings.HasPrefix(mode.name, "config-stdio")
					switch {
					case tool == "chat" && answers[i] != "logged":
						t.Fatalf("%s's chat: %q", p.name, answers[i])
					case tool == "chat" && stdio:
						// Neither call is the only one in flight: no message.
					case tool == "chat":
						for _, want := range []string{"from " + p.name, "debug from " + p.name} {
							if m := p.awaitLog(t); m.Data != want {
								t.Fatalf("%s got the log message %+v, want %q", p.name, m, want)
							}
						}
					case mode.name == "config-stdio":
						if !strings.Contains(answers[i], "refused: ") || !strings.Contains(answers[i], "2 tool calls were in flight on this stdio upstream") {
							t.Fatalf("%s's ask over stdio with two calls in flight: %q", p.name, answers[i])
						}
					default:
						// Over HTTP, each on its call's stream; on 2026-07-28,
						// each on its call's context.
						if want := "sampled: " + p.name + " answers from " + p.name; answers[i] != want {
							t.Fatalf("%s's ask: %q, want %q", p.name, answers[i], want)
						}
						if q := <-p.sampled; q != "from "+p.name {
							t.Fatalf("%s was asked %q", p.name, q)
						}
					}
				}
			}
			for _, p := range peers {
				select {
				case q := <-p.sampled:
					t.Errorf("%s was also asked %q", p.name, q)
				case m := <-p.logs:
					t.Errorf("%s also got the log message %+v", p.name, m)
				default:
				}
			}
		})
	}
}

// A keyed call's replay serves the stored result: the upstream does not
// run again, so the client is not asked again.
func TestGatewayReplayDoesNotSample(t *testing.T) {
	dir := t.TempDir()
	contracts := filepath.Join(dir, "contracts.yaml")
	os.WriteFile(contracts, []byte("ask_keyed:\n  kind: same_key_replay\n  reconcile: ask\n  rationale: Replays by key.\n"), 0o644)
	url := relaySet(t, gatewayconfig.Upstream{Name: "relay", Kind: gatewayconfig.KindMCP, URL: relayHTTPUpstream(t), Contracts: contracts})
	a := newPeer("A")
	cs := connect(t, url, a.options())
	var first string
	for i := range 2 {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask_keyed", Arguments: map[string]any{"q": "once", "idempotencyKey": "k-1"}})
		got := textOf(res, err)
		if i == 0 {
			first = got
			if got != "sampled: A answers once" {
				t.Fatalf("first call: %q", got)
			}
			continue
		}
		if got != first || res.Meta[mcpserver.MetaReplayed] != true {
			t.Fatalf("the retry: %q %v", got, res.Meta)
		}
	}
	if n := len(a.sampled); n != 1 {
		t.Fatalf("A was asked %d times", n)
	}
}

// Issue 34 item 4: the upstream's resources/list_changed and
// prompts/list_changed reach the gateway's clients, which then list the
// change (and nothing of how the gateway sent it), with one upstream and
// in a config.
func TestGatewayRelaysListChanged(t *testing.T) {
	for _, mode := range []string{"one", "config"} {
		t.Run(mode, func(t *testing.T) {
			l := newLibrary(t)
			var url string
			if mode == "one" {
				url = startMerging(t, []*library{l}, []string{""})
			} else {
				url = relaySet(t, gatewayconfig.Upstream{Name: "lib", Kind: gatewayconfig.KindMCP, URL: l.url, Prefix: true})
			}
			changed := make(chan string, 10)
			cs := connect(t, url, &mcp.ClientOptions{
				ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { changed <- "resources" },
				PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { changed <- "prompts" },
			})
			caps := cs.InitializeResult().Capabilities
			if !caps.Resources.ListChanged || !caps.Prompts.ListChanged {
				t.Fatalf("capabilities: resources %+v, prompts %+v", caps.Resources, caps.Prompts)
			}
			await := func(want string) {
				t.Helper()
				select {
				case got := <-changed:
					if got != want {
						t.Fatalf("%s list_changed, want %s", got, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("no %s list_changed reached the client", want)
				}
			}
			l.srv.AddResource(&mcp.Resource{URI: "file:///books/c.txt", Name: "c"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "book c"}}}, nil
			})
			await("resources")
			var uris []string
			for r, err := range cs.Resources(t.Context(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				uris = append(uris, r.URI)
			}
			if strings.Join(uris, " ") != "file:///books/a.txt file:///books/b.txt file:///books/c.txt" {
				t.Fatalf("resources after the change: %v", uris)
			}
			l.srv.RemovePrompts("summarize")
			await("prompts")
			var prompts []string
			for p, err := range cs.Prompts(t.Context(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				prompts = append(prompts, p.Name)
			}
			want := "greet"
			if mode == "config" {
				want = "lib.greet"
			}
			if strings.Join(prompts, " ") != want {
				t.Fatalf("prompts after the change: %v", prompts)
			}
		})
	}
}

// A progress notification the upstream sends just before its result
// reaches the client: the result waits for it to be relayed (go-sdk's
// client hands notifications to their handler on a goroutine of their
// own, which ran after the call had returned and its token was gone).
func TestGatewayRelaysProgressSentJustBeforeTheResult(t *testing.T) {
	for _, mode := range relayModes(t) {
		t.Run(mode.name, func(t *testing.T) {
			url := mode.start(t)
			progress := make(chan string, 100)
			cs := connect(t, url, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { progress <- req.Params.Message },
			})
			for i := range 20 {
				p := &mcp.CallToolParams{Name: mode.prefix + "tick", Arguments: map[string]any{"q": fmt.Sprint(i)}}
				p.SetProgressToken(fmt.Sprint("mine-", i))
				if got := textOf(cs.CallTool(t.Context(), p)); got != "ticked" {
					t.Fatalf("tick: %q", got)
				}
				select {
				case m := <-progress:
					if m != fmt.Sprint(i) {
						t.Fatalf("call %d: progress %q", i, m)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("call %d: its progress never came", i)
				}
			}
		})
	}
}

// A reload that adds or removes an MCP upstream changes the resources and
// prompts served: the clients get both list_changed.
func TestSetReloadSendsListChanged(t *testing.T) {
	a, b := newLibrary(t), newLibrary(t)
	set := gateway.NewSet(gateway.SetOptions{})
	t.Cleanup(func() { set.Close() })
	declare := func(ups ...gatewayconfig.Upstream) []idem.Operation {
		d, err := set.Declare(t.Context(), config(t, ups...))
		if err != nil {
			t.Fatal(err)
		}
		d.Commit()
		return d.Operations
	}
	first := gatewayconfig.Upstream{Name: "a", Kind: gatewayconfig.KindMCP, URL: a.url, Prefix: true}
	url, _ := serveGateway(t, "", declare(first), set.Forwarder())
	changed := make(chan string, 10)
	cs := connect(t, url, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { changed <- "resources" },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { changed <- "prompts" },
	})
	for _, ups := range [][]gatewayconfig.Upstream{
		{first, {Name: "b", Kind: gatewayconfig.KindMCP, URL: b.url, Prefix: true}}, // b added
		{first}, // b removed
	} {
		declare(ups...)
		got := map[string]bool{}
		for len(got) < 2 {
			select {
			case kind := <-changed:
				got[kind] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("after a reload to %d upstreams the client got list_changed of %v only", len(ups), got)
			}
		}
		var prompts []string
		for p, err := range cs.Prompts(t.Context(), nil) {
			if err != nil {
				t.Fatal(err)
			}
			prompts = append(prompts, p.Name)
		}
		if len(prompts) != 2*len(ups) {
			t.Fatalf("prompts with %d upstreams: %v", len(ups), prompts)
		}
	}
}

// A relayed request ends with the call: when the client cancels its call
// while it is being asked, the upstream's request ends at once, with an
// error, though the upstream goes on waiting for its answer (it ignores
// the call's cancellation) and the client never answers. (The client's
// own handler is not told: go-sdk v1.8.0 sends notifications/cancelled on
// the call's stream, which ended with the call.)
func TestGatewayRelayEndsWithTheCall(t *testing.T) {
	for _, mode := range relayModes(t)[:2] { // the upstream in process, to watch its request
		t.Run(mode.name, func(t *testing.T) {
			sampled := make(chan error, 1)
			gateway.RelaySampledForTest = func(err error) { sampled <- err }
			t.Cleanup(func() { gateway.RelaySampledForTest = nil })
			url := mode.start(t)
			asked := make(chan struct{}, 1)
			over := make(chan struct{})
			defer close(over)
			cs := connect(t, url, &mcp.ClientOptions{
				CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					asked <- struct{}{}
					select { // never answers
					case <-ctx.Done():
					case <-over:
					}
					return nil, errors.New("no answer")
				},
			})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mode.prefix + "ask", Arguments: map[string]any{"q": "wait", "stubborn": true}})
				done <- err
			}()
			select {
			case <-asked:
			case <-time.After(10 * time.Second):
				t.Fatal("the client was never asked")
			}
			cancel()
			select {
			case err := <-sampled:
				if err == nil {
					t.Fatal("the upstream's request was answered")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream's request outlived the call")
			}
			<-done
		})
	}
}

// An upstream down at start that comes up later adds its resources and
// prompts to those served: the clients get list_changed of both, as they
// do when a reload adds an upstream. Before, the same member's first
// session changed the lists without a word.
func TestSetUpstreamThatComesUpSendsListChanged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there yet
	a := newLibrary(t)
	set := gateway.NewSet(gateway.SetOptions{Backoff: time.Second})
	t.Cleanup(func() { set.Close() })
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
	url, _ := serveGateway(t, "", d.Operations, set.Forwarder())
	changed := make(chan string, 10)
	cs := connect(t, url, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { changed <- "resources" },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { changed <- "prompts" },
	})
	newLibraryAt(t, addr) // it comes up where it was said to be
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case kind := <-changed:
			got[kind] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("once the upstream down at start answers, the client got list_changed of %v only", got)
		}
	}
	var prompts []string
	for p, err := range cs.Prompts(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, p.Name)
	}
	if len(prompts) != 4 {
		t.Fatalf("prompts once both upstreams are up: %v", prompts)
	}
}

// A call's upstream cannot hold more than 8 requests on its client at
// once: of 20 sampling requests sent together while the client answers
// none, 12 are refused at once, saying why. Before, all 20 waited.
func TestGatewayRelayBoundsWaitingRequests(t *testing.T) {
	for _, mode := range relayModes(t)[:3] { // on MCP 2026-07-28 a call asks once
		t.Run(mode.name, func(t *testing.T) {
			url := mode.start(t)
			release := make(chan struct{})
			defer close(release)
			cs := connect(t, url, &mcp.ClientOptions{
				CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					select { // never answers
					case <-ctx.Done():
					case <-release:
					}
					return nil, errors.New("no answer")
				},
			})
			got := textOf(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mode.prefix + "flood", Arguments: map[string]any{}}))
			if got != "refused 12" {
				t.Fatalf("flood of 20 sampling requests: %q, want 12 refused", got)
			}
		})
	}
}
