package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
)

// With IDEM_GATEWAY_TEST_STDIO set, the test binary is a stdio MCP
// server (tool add) that writes its pid to that file: the spawned
// upstream of TestUpstreamStdioDiedBetweenCalls.
func TestMain(m *testing.M) {
	if v := os.Getenv(RelayUpstreamEnv); v != "" {
		if err := RelayUpstreamForTest(v == "legacy").Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if effects := os.Getenv("IDEM_GATEWAY_TEST_STDIO_DROP"); effects != "" {
		dropAfterReadingACall(effects)
		return
	}
	if pidFile := os.Getenv("IDEM_GATEWAY_TEST_STDIO"); pidFile != "" {
		os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644)
		s := mcp.NewServer(&mcp.Implementation{Name: "stdio-upstream", Version: "1"}, nil)
		type in struct {
			N int `json:"n"`
		}
		mcp.AddTool(s, &mcp.Tool{Name: "add", InputSchema: map[string]any{"type": "object"}},
			func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(a.N + 1)}}}, nil, nil
			})
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestUpstreamStdioDiedBetweenCalls kills a spawned upstream between two
// calls, so that its session has not ended (a shell around it holds its
// stdout) but no process reads its stdin any more: the next call is not
// dispatched (idem.NotDispatched: 503, the key free), and the one after
// it spawns the upstream anew. A call the upstream received is never
// reported so (TestGatewayStdioUpstreamDies in e2e).
func TestUpstreamStdioDiedBetweenCalls(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx := t.Context()
	u, err := Dial(ctx, UpstreamConfig{
		// The server holds the only read end of its stdin; the shell
		// stays, holding its stdout, so no end of output tells the gateway.
		Command: []string{"sh", "-c", `exec 3<&0 0</dev/null; "$0" <&3 3<&- & exec 3<&-; wait; exec sleep 15 2>/dev/null`, self},
		Env:     append(os.Environ(), "IDEM_GATEWAY_TEST_STDIO="+pidFile),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	add := func() (*mcp.CallToolResult, error) {
		return u.Call(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"n": 1}})
	}
	if res, err := add(); err != nil || res.IsError {
		t.Fatalf("add: %v %v", res, err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the upstream did not die")
		}
	}

	_, err = add()
	if !idem.IsNotDispatched(err) {
		t.Fatalf("a call to the dead upstream: %v, want not dispatched", err)
	}
	var ie *idem.Error
	if !errors.As(err, &ie) || ie.Code != idem.CodeUpstreamUnavailable {
		t.Fatalf("a call to the dead upstream: %v, want %s", err, idem.CodeUpstreamUnavailable)
	}
	res, err := add()
	if err != nil || res.IsError {
		t.Fatalf("add after the respawn: %v %v", res, err)
	}
	if raw2, _ := os.ReadFile(pidFile); string(raw2) == string(raw) {
		t.Fatal("the upstream was not spawned anew")
	}
}

// dropAfterReadingACall is a raw stdio MCP server that, once it has read
// a tools/call, notes the effect in the file effects and exits without
// answering: the hostile upstream of TestUpstreamStdioCallWrittenOnce.
func dropAfterReadingACall(effects string) {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.Unmarshal(in.Bytes(), &req)
		switch req.Method {
		case "initialize":
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"drop","version":"1"}}}`+"\n", req.ID)
		case "tools/list":
			deep := ""
			if os.Getenv("IDEM_GATEWAY_TEST_STDIO_DEEP") != "" {
				deep = `,{"name":"deep","inputSchema":` + strings.Repeat(`{"type":"object","properties":{"a":`, 500) + `{}` + strings.Repeat(`}}`, 500) + `}`
			}
			if os.Getenv("IDEM_GATEWAY_TEST_STDIO_MANY") != "" {
				// 2200 tools of 2 KiB: a 4.5 MiB page, over the bound of a
				// call's answer, within a listing's.
				var b strings.Builder
				for i := range 2200 {
					fmt.Fprintf(&b, `,{"name":"t%d","description":"%s","inputSchema":{"type":"object"}}`, i, strings.Repeat("d", 2<<10))
				}
				deep += b.String()
			}
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"add","inputSchema":{"type":"object"}}%s]}}`+"\n", req.ID, deep)
		case "tools/call":
			f, _ := os.OpenFile(effects, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			f.WriteString("x")
			f.Close()
			if os.Getenv("IDEM_GATEWAY_TEST_STDIO_BIG") != "" {
				fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}`+"\n", req.ID, strings.Repeat("a", 1<<20))
				continue
			}
			os.Exit(0)
		default:
			if req.ID != nil {
				fmt.Printf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`+"\n", req.ID)
			}
		}
	}
}

// TestUpstreamStdioCallWrittenOnce (issue 33 item 1): a spawned upstream
// that exits after reading a call ran it once, and the call is not
// reported as unsent (its key stays indeterminate, never free to run
// again): the gateway writes a call once and never re-sends it.
func TestUpstreamStdioCallWrittenOnce(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	effects := filepath.Join(t.TempDir(), "effects")
	u, err := Dial(t.Context(), UpstreamConfig{Command: []string{self}, Env: append(os.Environ(), "IDEM_GATEWAY_TEST_STDIO_DROP="+effects)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_, err = u.Call(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: map[string]any{}})
	if err == nil || idem.IsNotDispatched(err) {
		t.Fatalf("a call the upstream read and died on: %v, want an error that may have followed an effect", err)
	}
	if raw, _ := os.ReadFile(effects); string(raw) != "x" {
		t.Fatalf("the upstream ran the call %d times, want once", len(raw))
	}
}

// TestUpstreamStdioAnswerOverTheBound (issue 33 item 3): a spawned
// upstream answering a call with a line longer than the bound: the call
// ran, so it is EXECUTION_FAILED naming the bound, not unsent; the next
// call spawns the upstream anew.
func TestUpstreamStdioAnswerOverTheBound(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	effects := filepath.Join(t.TempDir(), "effects")
	u, err := Dial(t.Context(), UpstreamConfig{Command: []string{self}, MaxResultBytes: 64 << 10,
		Env: append(os.Environ(), "IDEM_GATEWAY_TEST_STDIO_DROP="+effects, "IDEM_GATEWAY_TEST_STDIO_BIG=1")})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_, err = u.Call(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: map[string]any{}})
	var ie *idem.Error
	if !errors.As(err, &ie) || ie.Code != idem.CodeExecutionFailed || !strings.Contains(err.Error(), "exceeded 65536 bytes") || idem.IsNotDispatched(err) {
		t.Fatalf("a 1 MiB line under a 64 KiB bound: %v", err)
	}
	if raw, _ := os.ReadFile(effects); string(raw) != "x" {
		t.Fatalf("the upstream ran the call %d times, want once", len(raw))
	}
}

// TestUpstreamStdioDeepToolIsLeftOut (issue 33, a low): a spawned
// upstream listing a tool nested 500 levels deep (the SDK refuses a
// message nested deeper than 1000 levels whole): that tool is left out
// with a warning, the others listed.
func TestUpstreamStdioDeepToolIsLeftOut(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u, err := Dial(t.Context(), UpstreamConfig{Command: []string{self},
		Env: append(os.Environ(), "IDEM_GATEWAY_TEST_STDIO_DROP="+filepath.Join(t.TempDir(), "effects"), "IDEM_GATEWAY_TEST_STDIO_DEEP=1")})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	tools, warnings, err := u.ListTools(t.Context())
	if err != nil || len(tools) != 1 || tools[0].Name != "add" || len(warnings) != 1 || !strings.Contains(warnings[0], `"deep"`) {
		t.Fatalf("tools %v, warnings %q, %v", tools, warnings, err)
	}
}

// TestUpstreamStdioLargeListPage: a 4.5 MiB tools/list page from a spawned
// upstream is read (a listing's bound, 32 MiB, not a call answer's).
func TestUpstreamStdioLargeListPage(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u, err := Dial(t.Context(), UpstreamConfig{Command: []string{self},
		Env: append(os.Environ(), "IDEM_GATEWAY_TEST_STDIO_DROP="+filepath.Join(t.TempDir(), "effects"), "IDEM_GATEWAY_TEST_STDIO_MANY=1")})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	tools, err := u.Tools(t.Context())
	if err != nil || len(tools) != 2201 {
		t.Fatalf("%d tools, %v", len(tools), err)
	}
}
