package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/mcpserver"
)

// eofSignal is a reader that closes reached when it returns io.EOF.
type eofSignal struct {
	r       io.Reader
	reached chan struct{}
}

func (e *eofSignal) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		select {
		case <-e.reached:
		default:
			close(e.reached)
		}
	}
	return n, err
}

// gatedBackend answers a call once gate is closed, or ends with the call's
// context.
type gatedBackend struct {
	fakeBackend
	gate <-chan struct{}
}

func (b gatedBackend) Call(ctx context.Context, name string, _ map[string]json.RawMessage, _ string, _ bool) (idem.Result, error) {
	select {
	case <-b.gate:
		return idem.Result{Status: 200, Data: json.RawMessage(`{}`), Meta: &idem.Meta{Operation: name}}, nil
	case <-ctx.Done():
		return idem.Result{}, idem.Errorf(idem.CodeCancelled, "the caller cancelled the call")
	}
}

// pipedSession is an initialize, its notification and n tools/call.
func pipedSession(n int) string {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}` + "\n")
	b.WriteString(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"thing.do","arguments":{"idempotencyKey":"k-%d"}}}`+"\n", i, i)
	}
	return b.String()
}

// answerIDs are the ids of the JSON-RPC answers on out.
func answerIDs(t *testing.T, out string) map[int]bool {
	t.Helper()
	ids := map[int]bool{}
	for line := range strings.Lines(out) {
		var msg struct {
			ID *int `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil || msg.ID == nil {
			t.Fatalf("line %q is not an answer: %v", line, err)
		}
		ids[*msg.ID] = true
	}
	return ids
}

// Calls still running when the input ends are answered before the session
// ends: the backend answers only after the reader has reported EOF.
func TestStdioAnswersRequestsReadBeforeEOF(t *testing.T) {
	const n = 10
	in := &eofSignal{r: strings.NewReader(pipedSession(n)), reached: make(chan struct{})}
	b := gatedBackend{fakeBackend: fakeBackend{tool(idem.RetrySameKeyReplay, `{"type":"object"}`)}, gate: in.reached}
	srv, err := mcpserver.New(t.Context(), b, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = srv.Run(t.Context(), &mcpserver.StdioTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{&out}})
	if err != nil && err != io.EOF {
		t.Fatalf("run: %v", err)
	}
	ids := answerIDs(t, out.String())
	for i := 0; i <= n; i++ {
		if !ids[i] {
			t.Fatalf("request %d unanswered; output:\n%s", i, out.String())
		}
	}
}

// The wait at the end of input is bounded: a call that never ends is
// cancelled once Drain has passed, and the log says so.
func TestStdioDrainIsBounded(t *testing.T) {
	b := gatedBackend{fakeBackend: fakeBackend{tool(idem.RetrySameKeyReplay, `{"type":"object"}`)}, gate: make(chan struct{})}
	srv, err := mcpserver.New(t.Context(), b, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	err = srv.Run(t.Context(), &mcpserver.StdioTransport{
		Reader: io.NopCloser(strings.NewReader(pipedSession(1))), Writer: nopWriteCloser{&out}, Drain: 1, Logger: logger,
	})
	if err != nil && err != io.EOF {
		t.Fatalf("run: %v", err)
	}
	if ids := answerIDs(t, out.String()); ids[1] {
		t.Fatalf("the call that never ended was answered:\n%s", out.String())
	}
	if !strings.Contains(log.String(), "unanswered=") {
		t.Fatalf("log %q does not report the unanswered call", log.String())
	}
}

// A client's notification stream (subscriptions/listen, which the SDK
// answers only when the session ends) does not hold the end of input back:
// the bridge ends at once, not after the drain bound.
func TestStdioDoesNotWaitForTheListenStream(t *testing.T) {
	srv, err := mcpserver.New(t.Context(), fakeBackend{tool(idem.RetrySameKeyReplay, `{"type":"object"}`)}, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	session := pipedSession(0) + `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}` + "\n"
	var out, log bytes.Buffer
	start := time.Now()
	err = srv.Run(t.Context(), &mcpserver.StdioTransport{
		Reader: io.NopCloser(strings.NewReader(session)), Writer: nopWriteCloser{&out}, Drain: time.Minute,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	if err != nil && err != io.EOF {
		t.Fatalf("run: %v", err)
	}
	if took := time.Since(start); took > 30*time.Second || strings.Contains(log.String(), "unanswered=") {
		t.Fatalf("the end of input waited %v for the listen stream; log %q", took, log.String())
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// A line that is not a JSON-RPC message is answered with the JSON-RPC
// error for it, and the bridge goes on answering the requests before and
// after it (SPEC §10.2; issue 28, item 6: one malformed line ended the
// bridge with exit 1).
func TestStdioAnswersMalformedLinesAndGoesOn(t *testing.T) {
	b := gatedBackend{fakeBackend: fakeBackend{tool(idem.RetrySameKeyReplay, `{"type":"object"}`)}, gate: closedGate()}
	srv, err := mcpserver.New(t.Context(), b, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	session := pipedSession(2)
	lines := strings.SplitAfter(session, "\n")
	// After the initialization: invalid JSON, JSON that is no message, an
	// empty batch, a blank line, then the two calls.
	input := lines[0] + lines[1] + "{not json\n" + `{"hello":1}` + "\n[]\n\n" + lines[2] + lines[3]
	var out bytes.Buffer
	err = srv.Run(t.Context(), &mcpserver.StdioTransport{Reader: io.NopCloser(strings.NewReader(input)), Writer: nopWriteCloser{&out}})
	if err != nil && err != io.EOF {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	ids := map[int]bool{}
	var codes []int
	for line := range strings.Lines(out.String()) {
		var msg struct {
			ID    *int `json:"id"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		switch {
		case msg.ID != nil:
			ids[*msg.ID] = true
		case msg.Error != nil:
			codes = append(codes, msg.Error.Code)
		default:
			t.Fatalf("line %q has neither an id nor an error", line)
		}
	}
	if !ids[0] || !ids[1] || !ids[2] {
		t.Fatalf("requests answered %v, want 0, 1 and 2; output:\n%s", ids, out.String())
	}
	if want := []int{-32700, -32600, -32600}; !slices.Equal(codes, want) {
		t.Fatalf("errors %v, want %v; output:\n%s", codes, want, out.String())
	}
}

func closedGate() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// keyBackend records the key each call came with.
type keyBackend struct {
	fakeBackend
	keys chan string
}

func (b keyBackend) Call(_ context.Context, name string, _ map[string]json.RawMessage, key string, _ bool) (idem.Result, error) {
	b.keys <- key
	return idem.Result{Status: 200, Data: json.RawMessage(`{}`), Meta: &idem.Meta{Operation: name}}, nil
}

// The stdio bridge takes a key given as a top-level params.idempotencyKey
// of tools/call, as /mcp does (SPEC §17): the SDK would drop that member.
func TestStdioTakesTheKeyOfTheParams(t *testing.T) {
	b := keyBackend{fakeBackend: fakeBackend{tool(idem.RetrySameKeyReplay, `{"type":"object"}`)}, keys: make(chan string, 1)}
	srv, err := mcpserver.New(t.Context(), b, mcpserver.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	session := pipedSession(0) + `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"thing.do","arguments":{},"idempotencyKey":"k-params"}}` + "\n"
	var out bytes.Buffer
	if err := srv.Run(t.Context(), &mcpserver.StdioTransport{Reader: io.NopCloser(strings.NewReader(session)), Writer: nopWriteCloser{&out}}); err != nil && err != io.EOF {
		t.Fatalf("run: %v", err)
	}
	select {
	case key := <-b.keys:
		if key != "k-params" {
			t.Fatalf("the call came with key %q, want k-params", key)
		}
	default:
		t.Fatalf("the call never reached the backend:\n%s", out.String())
	}
}
