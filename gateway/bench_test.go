package gateway_test

import (
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkGatewayRead measures a fresh_read tool call (the upstream's
// total, readOnlyHint) in one process, over loopback HTTP: direct is a
// go-sdk client calling the go-sdk upstream, gateway the same client
// calling it through the gateway (server.New on SQLite, Upstream, the
// tool's raw operation); the json rows are the same with an upstream
// that answers application/json rather than an SSE stream
// (StreamableHTTPOptions.JSONResponse). Every figure is the whole
// process's (client, gateway and upstream): the gateway's cost per read is
// the difference of the two rows. cpu-µs/op is the process's CPU time
// (user and system, the garbage collector included) per call; idem
// gateway runs with GOGC=400 (cmd/idem), a test binary with Go's 100
// unless GOGC says otherwise. docs/PERFORMANCE.md, issue 34.
func BenchmarkGatewayRead(b *testing.B) {
	u := newUpstream(b)
	benchRead(b, u)
	b.Run("json", func(b *testing.B) {
		// An upstream of its own, the same tools answering in JSON.
		j := newUpstream(b)
		j.http.Close()
		j.opts = &mcp.StreamableHTTPOptions{JSONResponse: true}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		j.url = "http://" + ln.Addr().String() + "/mcp"
		j.serve(b, ln)
		benchRead(b, j)
	})
}

// benchRead runs the direct and gateway rows against u.
func benchRead(b *testing.B, u *upstream) {
	b.Run("direct", func(b *testing.B) {
		client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := client.Connect(b.Context(), &mcp.StreamableClientTransport{Endpoint: u.url,
			HTTPClient: &http.Client{Transport: http.DefaultTransport}, DisableStandaloneSSE: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		benchCalls(b, u, cs)
	})
	b.Run("gateway", func(b *testing.B) {
		g := newGateway(b, u, overlay)
		benchCalls(b, u, g.client)
	})
}

// benchCalls calls total b.N times on cs, each call with other arguments,
// and reports the HTTP requests u got per call.
func benchCalls(b *testing.B, u *upstream, cs *mcp.ClientSession) {
	b.ReportAllocs()
	call := func(i int) {
		res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: "total", Arguments: map[string]any{"i": strconv.Itoa(i)}})
		if err != nil || res.IsError {
			b.Fatalf("total: %v %+v", err, res)
		}
	}
	for i := range 20 {
		call(i) // warm: the connections, the tool's compiled schema
	}
	i := 0
	cpu, requests := cpuTime(), u.requests.Load()
	for b.Loop() {
		i++
		call(i)
	}
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(u.requests.Load()-requests)/float64(b.N), "upstream-req/op")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
