package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The gateway mode (--gateway) measures what `idem gateway` (SPEC §17)
// adds in front of an MCP server: a small go-sdk MCP server runs over
// streamable HTTP as a process of its own (the harness re-executed with
// mcpUpstreamEnv set), and the same go-sdk clients call its tools directly
// and through `idem gateway --upstream URL` on each store of --stores
// (default sqlite): the read tool (fresh_read) and the write tool (first
// keyed calls, replays), each at saturation and paced at half the direct
// rate of the same tool. See bench/README.md.

// mcpUpstreamEnv, when set, makes the harness the MCP upstream of the
// gateway mode.
const mcpUpstreamEnv = "IDEM_BENCH_MCP_UPSTREAM"

// The upstream's tools: readTool is readOnlyHint (a fresh_read through
// the gateway), writeTool is declared same_key_replay by gatewayContracts.
const (
	readTool  = "get_item"
	writeTool = "create_item"
)

// gatewayContracts is the gateway's --contracts overlay.
const gatewayContracts = writeTool + ":\n  kind: same_key_replay\n  reconcile: " + readTool +
	"\n  rationale: Creates an item; the same key replays the original answer.\n"

// mcpUpstreamMain serves the MCP upstream on a free port of 127.0.0.1 and
// prints `listening on http://ADDR` on stderr.
func mcpUpstreamMain() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("bench MCP upstream: %v", err)
	}
	counted := &countingListener{Listener: ln}
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())
	fatalf("bench MCP upstream: %v", http.Serve(counted, mcpUpstream(&counted.accepted)))
}

// mcpUpstream is the MCP upstream: the go-sdk's streamable HTTP handler
// with its defaults at /mcp, and GET /connections answering accepted. It
// keeps nothing: each result is a few bytes of JSON text, create_item's
// with a new id (an error result without a name).
func mcpUpstream(accepted *atomic.Int64) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-upstream", Version: "1"}, nil)
	var next atomic.Int64
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	args := func(req *mcp.CallToolRequest, name string) string {
		var a map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &a)
		s, _ := a[name].(string)
		return s
	}
	schema := func(name string) json.RawMessage {
		return json.RawMessage(`{"type":"object","properties":{"` + name + `":{"type":"string","minLength":1}},"required":["` + name + `"],"additionalProperties":false}`)
	}
	srv.AddTool(&mcp.Tool{Name: readTool, Description: "Show one item.", InputSchema: schema("id"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(`{"id":` + strconv.Quote(args(req, "id")) + `,"name":"bench"}`), nil
		})
	srv.AddTool(&mcp.Tool{Name: writeTool, Description: "Create an item.", InputSchema: schema("name")},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := args(req, "name")
			if name == "" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "name is required"}}}, nil
			}
			return text(`{"id":"it_` + strconv.FormatInt(next.Add(1), 10) + `","name":` + strconv.Quote(name) + `}`), nil
		})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	mux.HandleFunc("GET /connections", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, accepted.Load())
	})
	return mux
}

// countingListener counts the connections it accepted: the upstream's
// GET /connections answers the count, so that the harness can tell how
// many TCP connections a phase opened to the upstream (a client that
// keeps too few idle connections opens one for most calls).
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// upstreamConnections reads the MCP upstream's count of accepted
// connections (-1 when it cannot).
func upstreamConnections(ctx context.Context, hc *http.Client, upstream string) int64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, upstream+"/connections", nil)
	if err != nil {
		return -1
	}
	resp, err := hc.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64))
	n, perr := strconv.ParseInt(string(b), 10, 64)
	if err != nil || perr != nil || resp.StatusCode != http.StatusOK {
		return -1
	}
	return n
}

// measureConns is run.m.measure with the TCP connections the phase opened to
// the upstream, per call, in the row.
func measureConns(ctx context.Context, run *frontRun, via, phaseName string, rate float64, fronts []*server, stat func() dbSample,
	do func(ctx context.Context, w, i int) error) ProxyRow {
	before := upstreamConnections(ctx, run.hc, run.up.url)
	r := run.m.measure(ctx, via, phaseName, rate, fronts, stat, do)
	if after := upstreamConnections(ctx, run.hc, run.up.url); before >= 0 && after >= before && r.Requests > 0 {
		// The harness's own GET /connections is one call on a kept connection, or one new connection.
		r.UpstreamConnsPerReq = float64(after-before) / float64(r.Requests)
	}
	return r
}

// gatewayPhaseTitles names the phases of the gateway mode.
var gatewayPhaseTitles = map[string]string{
	"read":        readTool + " (fresh_read)",
	"read@half":   readTool + " (fresh_read)",
	"write":       writeTool + ", no key",
	"write@half":  writeTool + ", no key",
	"first":       writeTool + ", a new key each (first keyed call)",
	"first@half":  writeTool + ", a new key each (first keyed call)",
	"replay":      writeTool + ", a key completed in `first` (replay)",
	"replay@half": writeTool + ", a key completed in `first` (replay)",
}

// gatewayAgainst names, for each phase through the gateway, the direct
// phase it is compared with.
var gatewayAgainst = map[string]string{
	"read": "read", "read@half": "read@half",
	"first": "write", "first@half": "write@half",
	"replay": "write", "replay@half": "write@half",
}

// gatewayTable renders the gateway mode's rows.
var gatewayTable = frontTable{
	heading: "idem gateway against calling the MCP upstream directly",
	intro: "The upstream is a go-sdk MCP server over streamable HTTP in a process of its own (bench/gateway.go); every call is a go-sdk client's tools/call, " +
		"one session per client. \"@half\" rows are paced at half the direct row's rate of the same tool; \"over direct\" is the row's p50 (p99) minus the direct row's " +
		"at the same pace (read, or write without a key).",
	front:  "idem gateway",
	short:  "gateway",
	titles: gatewayPhaseTitles,
}

// runGateway starts the MCP upstream, measures the direct rows, then runs
// each store's gateway in front of the same upstream.
func runGateway(ctx context.Context, o options, tmp, pgAdmin string) ([]ProxyRow, error) {
	run, err := startFrontRun(ctx, o, mcpUpstreamEnv, "the bench MCP upstream")
	if err != nil {
		return nil, err
	}
	defer run.close()
	direct, err := connectAll(ctx, run.hc, run.up.url+"/mcp", o.clients)
	defer closeAll(direct)
	if err != nil {
		return nil, fmt.Errorf("connecting to the MCP upstream: %w", err)
	}
	drive(ctx, "gateway direct warm-up", o.clients, run.warm, func(ctx context.Context, w, i int) error {
		_, err := callTool(ctx, direct[w], readTool, "id", fmt.Sprintf("warm-%d-%d", w, i), "")
		return err
	})
	read := func(ctx context.Context, w, i int) error {
		_, err := callTool(ctx, direct[w], readTool, "id", fmt.Sprintf("it-%d-%d", w, i), "")
		return err
	}
	write := func(ctx context.Context, w, i int) error {
		_, err := callTool(ctx, direct[w], writeTool, "name", fmt.Sprintf("d-%d-%d", w, i), "")
		return err
	}
	rows := []ProxyRow{measureConns(ctx, run, "direct", "read", 0, nil, loadSample, read)}
	rows = append(rows, measureConns(ctx, run, "direct", "write", 0, nil, loadSample, write))
	half := map[string]float64{"read": rows[0].PerSecond / 2, "write": rows[1].PerSecond / 2}
	rows = append(rows, measureConns(ctx, run, "direct", "read@half", half["read"], nil, loadSample, read))
	rows = append(rows, measureConns(ctx, run, "direct", "write@half", half["write"], nil, loadSample, write))
	closeAll(direct)

	for _, name := range o.stores {
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		more, err := gatewayStore(ctx, o, name, tmp, pgAdmin, run, half)
		if err != nil {
			return rows, fmt.Errorf("gateway %s: %w", name, err)
		}
		rows = append(rows, more...)
	}
	relate(rows, gatewayAgainst)
	return rows, nil
}

// gatewayStore runs `idem gateway` on one store (two instances sharing the
// database for pg2, each client a session with one of them) and measures
// the read, first keyed calls and replays, at saturation and paced at
// half[read] and half[write].
func gatewayStore(ctx context.Context, o options, name, tmp, pgAdmin string, run *frontRun, half map[string]float64) ([]ProxyRow, error) {
	fs, err := openFrontStore(ctx, o, "gateway", name, tmp, pgAdmin)
	if err != nil {
		return nil, err
	}
	defer fs.close()
	contracts := filepath.Join(fs.dir, "contracts.yaml")
	if err := os.WriteFile(contracts, []byte(gatewayContracts), 0o644); err != nil {
		return nil, err
	}
	progressf("gateway %s: starting %d idem gateway instance(s)", name, fs.instances)
	gateways, err := fs.start(ctx, o, "gateway", "--upstream", run.up.url+"/mcp", "--contracts", contracts, "--reload-interval", "0")
	defer stopAll(gateways)
	if err != nil {
		return nil, err
	}
	sessions := make([]*mcp.ClientSession, o.clients)
	defer func() { closeAll(sessions) }()
	for g, gw := range gateways {
		var some []*mcp.ClientSession
		some, err = connectAll(ctx, run.hc, gw.url+"/mcp", (o.clients-g+len(gateways)-1)/len(gateways))
		for j, cs := range some {
			sessions[g+j*len(gateways)] = cs
		}
		if err != nil {
			return nil, fmt.Errorf("connecting to idem gateway: %w", err)
		}
	}
	readName, writeName, err := servedNames(ctx, sessions[0])
	if err != nil {
		return nil, err
	}

	drive(ctx, "gateway "+name+" warm-up", o.clients, run.warm, func(ctx context.Context, w, i int) error {
		_, err := callTool(ctx, sessions[w], readName, "id", fmt.Sprintf("warm-%d-%d", w, i), "")
		return err
	})
	read := func(ctx context.Context, w, i int) error {
		_, err := callTool(ctx, sessions[w], readName, "id", fmt.Sprintf("it-%d-%d", w, i), "")
		return err
	}
	// Each first keyed call keeps its key and the text it was answered;
	// a replay must answer that text again (a second execution upstream
	// would answer another id).
	type done struct{ key, text string }
	keys := make([][]done, o.clients)
	first := func(prefix string) func(ctx context.Context, w, i int) error {
		return func(ctx context.Context, w, i int) error {
			k := fmt.Sprintf("%s-%d-%d", prefix, w, i)
			text, err := callTool(ctx, sessions[w], writeName, "name", k, "bench-"+k)
			if err == nil {
				keys[w] = append(keys[w], done{k, text})
			}
			return err
		}
	}
	replay := func(ctx context.Context, w, i int) error {
		own := keys[w]
		if len(own) == 0 {
			return fmt.Errorf("client %d has no completed key to replay", w)
		}
		d := own[i%len(own)]
		text, err := callTool(ctx, sessions[w], writeName, "name", d.key, "bench-"+d.key)
		if err == nil && text != d.text {
			err = fmt.Errorf("replay of key bench-%s answered %.100q, the first call %.100q", d.key, text, d.text)
		}
		return err
	}
	rows := []ProxyRow{
		measureConns(ctx, run, name, "read", 0, gateways, fs.stat, read),
		measureConns(ctx, run, name, "read@half", half["read"], gateways, fs.stat, read),
		measureConns(ctx, run, name, "first", 0, gateways, fs.stat, first("g")),
		measureConns(ctx, run, name, "first@half", half["write"], gateways, fs.stat, first("h")),
	}
	if rows[2].Requests+rows[3].Requests == 0 {
		return nil, fmt.Errorf("no first keyed call succeeded: %s", rows[2].FirstError)
	}
	rows = append(rows, measureConns(ctx, run, name, "replay", 0, gateways, fs.stat, replay),
		measureConns(ctx, run, name, "replay@half", half["write"], gateways, fs.stat, replay))
	return rows, nil
}

// bearerTransport adds the harness's token to every request.
type bearerTransport struct{ next http.RoundTripper }

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return t.next.RoundTrip(r)
}

// connectAll opens n go-sdk client sessions to the streamable HTTP
// endpoint, over hc's transport with the harness's token, without the
// standalone SSE stream (the harness needs no server-initiated message).
// On error it returns the sessions opened so far, for the caller to close.
func connectAll(ctx context.Context, hc *http.Client, endpoint string, n int) ([]*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "idem-bench", Version: "1"}, nil)
	httpClient := &http.Client{Transport: bearerTransport{next: hc.Transport}, Timeout: hc.Timeout}
	var out []*mcp.ClientSession
	for range n {
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: httpClient,
			DisableStandaloneSSE: true, MaxRetries: -1}, nil)
		if err != nil {
			return out, err
		}
		out = append(out, cs)
	}
	return out, nil
}

func closeAll(sessions []*mcp.ClientSession) {
	for _, cs := range sessions {
		if cs != nil {
			_ = cs.Close()
		}
	}
}

// servedNames finds the names under which the gateway serves the
// upstream's two tools: the same name, or one ending in "."+name (a
// namespaced name).
func servedNames(ctx context.Context, cs *mcp.ClientSession) (read, write string, err error) {
	var names []string
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return "", "", err
		}
		names = append(names, t.Name)
	}
	read, write = servedName(names, readTool), servedName(names, writeTool)
	if read == "" || write == "" {
		return "", "", fmt.Errorf("the gateway does not serve %s and %s; it serves %v", readTool, writeTool, names)
	}
	return read, write, nil
}

// servedName is the name of names that is tool or ends in "."+tool, or "".
func servedName(names []string, tool string) string {
	for _, n := range names {
		if n == tool || strings.HasSuffix(n, "."+tool) {
			return n
		}
	}
	return ""
}

// callTool calls tool with the one string argument arg=value, with the
// idempotency key in params._meta unless key is empty, and returns the
// result's text. An error result is an error.
func callTool(ctx context.Context, cs *mcp.ClientSession, tool, arg, value, key string) (string, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: map[string]any{arg: value}}
	if key != "" {
		p.Meta = mcp.Meta{"idempotencyKey": key}
	}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			text.WriteString(t.Text)
		}
	}
	if res.IsError {
		return "", fmt.Errorf("%s answered an error result: %.300s", tool, text.String())
	}
	return text.String(), nil
}
