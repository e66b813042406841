package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRelateComparesEachRowWithItsDirectRow(t *testing.T) {
	row := func(via, phase string, rate, p50, p99 float64) ProxyRow {
		return ProxyRow{Via: via, Row: Row{Phase: phase, PerSecond: rate, P50Ms: p50, P99Ms: p99}}
	}
	rows := []ProxyRow{
		row("direct", "read", 1000, 1, 4),
		row("direct", "read@half", 500, 0.5, 2),
		row("direct", "write", 800, 2, 6),
		row("sqlite", "read", 400, 3, 10),
		row("sqlite", "read@half", 500, 1.25, 7),
		row("sqlite", "replay", 1200, 1.5, 5),
		row("sqlite", "other", 10, 9, 9), // no direct row named: left alone
	}
	relate(rows, gatewayAgainst)
	for i, want := range []struct{ p50, p99, vs float64 }{
		{}, {}, {},
		{2, 6, 0.4},
		{0.75, 5, 1},
		{-0.5, -1, 1.5},
		{},
	} {
		r := rows[i]
		if r.AddedP50Ms != want.p50 || r.AddedP99Ms != want.p99 || r.VsDirect != want.vs {
			t.Errorf("%s %s: added p50 %v, p99 %v, ×direct %v; want %v, %v, %v",
				r.Via, r.Phase, r.AddedP50Ms, r.AddedP99Ms, r.VsDirect, want.p50, want.p99, want.vs)
		}
	}
}

func TestFrontTableRendersEveryRowAndTheFirstErrors(t *testing.T) {
	rows := []ProxyRow{
		{Via: "direct", Row: Row{Phase: "read", PerSecond: 1000, P50Ms: 1, P99Ms: 4}},
		{Via: "sqlite", Row: Row{Phase: "read@half", PerSecond: 499.6, P50Ms: 1.25, P99Ms: 7, PacedAt: 500,
			CPUPerReqUs: 812, RSSMB: 40, AddedP99Ms: 3, Errors: 2, FirstError: "boom"}, UpstreamConnsPerReq: 0.25, FrontAllocBytesPerReq: 204800, FrontAllocsPerReq: 1500, AddedP50Ms: 0.25, VsDirect: 0.5},
	}
	var b strings.Builder
	gatewayTable.markdown(&b, rows)
	out := b.String()
	for _, want := range []string{
		"### idem gateway against calling the MCP upstream directly",
		"| gateway CPU µs/req | gateway KiB alloc/req | gateway allocs/req |",
		"| direct | get_item (fresh_read) | 1000 |  | 1.00 | 4.00 |",
		"| idem gateway, SQLite | get_item (fresh_read), paced at 500/s | 500 | 0.50 | 1.25 | 7.00 | 0.00 | +0.25 | +3.00 | 812 | 200 | 1500 | 0.00 · 0.00 · 0.00 | 0 | 0.250 |  |  | 40 | 2 |",
		"gateway sqlite read@half, first error: `boom`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	gatewayTable.markdown(&b, nil)
	if b.Len() != 0 {
		t.Errorf("no rows rendered %q, want nothing", b.String())
	}
}

func TestServedNameTakesTheToolOrItsNamespacedName(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"create_item", "get_item"}, "get_item"},
		{[]string{"bench.create_item", "bench.get_item"}, "bench.get_item"},
		{[]string{"get_items", "xget_item"}, ""},
		{nil, ""},
	} {
		if got := servedName(c.names, readTool); got != c.want {
			t.Errorf("servedName(%v) = %q, want %q", c.names, got, c.want)
		}
	}
}

// TestMeasureScrapesEachFrontOnceBeforeAndOnceAfter: a phase reads a
// front's GET /metrics once before and once after, and takes its heap
// figures and store calls from those two reads.
func TestMeasureScrapesEachFrontOnceBeforeAndOnceAfter(t *testing.T) {
	var scrapes atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := scrapes.Add(1)
		fmt.Fprintf(w, "# TYPE go_memstats_alloc_bytes_total counter\ngo_memstats_alloc_bytes_total_other 1\n"+
			"go_memstats_alloc_bytes_total %d\ngo_memstats_mallocs_total %d\nidem_store_duration_seconds_count{method=\"get\"} %d\n",
			1000*n, 10*n, 3*n)
	}))
	defer front.Close()
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	fronts := []*server{{url: front.URL, cmd: &exec.Cmd{Process: self}}}
	m := meter{clients: 1, duration: 20 * time.Millisecond, upPID: os.Getpid(), hc: front.Client()}
	r := m.measure(t.Context(), "idem", "phase", 0, fronts, func() dbSample { return dbSample{} },
		func(context.Context, int, int) error { return nil })
	if n := scrapes.Load(); n != 2 {
		t.Fatalf("GET /metrics read %d times for one phase, want 2", n)
	}
	n := float64(r.Requests)
	in := func(perReq float64) float64 { return math.Round(perReq * n) }
	if in(r.FrontAllocBytesPerReq) != 1000 || in(r.FrontAllocsPerReq) != 10 || in(r.StoreCallsPerReq) != 3 {
		t.Errorf("per request over %v requests: %v bytes, %v allocs, %v store calls; want 1000, 10, 3 in all",
			n, r.FrontAllocBytesPerReq, r.FrontAllocsPerReq, r.StoreCallsPerReq)
	}
}
