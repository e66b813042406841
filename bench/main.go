// Command bench is the side-by-side benchmark harness of issue 9: it starts
// the built `idem serve --demo` on SQLite, on PostgreSQL and as two instances
// sharing PostgreSQL, drives each over real HTTP with N concurrent clients,
// and reports the ceiling (a route of the same shape with no idempotency
// work), first keyed executions, replays, a same-key storm and the store's
// own raw limit, side by side. See bench/README.md.
//
//	go run ./bench --quick
//	go run ./bench --duration 10s --clients 32 --stores sqlite,pg,pg2
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	binary   string
	duration time.Duration
	clients  int
	storm    int
	prefill  int
	stores   []string
	pgURL    string
	pgParams string
	serve    []string // extra flags for idem serve
	outDir   string
	quick    bool
	memory   int  // concurrent large bodies of the memory mode (memory.go); 0: off
	proxy    bool // the proxy mode (proxy.go) instead of the phases
	gateway  bool // the gateway mode (gateway.go) instead of the phases
	dbPID    int  // the throwaway cluster's postmaster, for its CPU (dbstat.go)
	tracing  bool // the servers export their traces to a sink (tracing.go)
}

func main() {
	if os.Getenv(upstreamEnv) != "" {
		upstreamMain()
		return
	}
	if os.Getenv(mcpUpstreamEnv) != "" {
		mcpUpstreamMain()
		return
	}
	if store := os.Getenv(floorEnv); store != "" {
		floorMain(store)
		return
	}
	var o options
	var stores string
	flag.StringVar(&o.binary, "binary", "", "idem binary to benchmark (default: go build ./cmd/idem into a temp dir)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured phase")
	flag.IntVar(&o.clients, "clients", 32, "concurrent HTTP clients (and raw-loop clients)")
	flag.IntVar(&o.prefill, "prefill", 0, "completed attempt records written straight into each store before the phases (retained keys: 1000, 100000, 1000000)")
	flag.IntVar(&o.storm, "storm", 1000, "concurrent requests with one key in the same-key storm")
	flag.StringVar(&stores, "stores", "sqlite,pg,pg2", "stores to run, comma-separated: sqlite, pg (one instance), pg2 (two instances sharing PostgreSQL)")
	flag.StringVar(&o.pgURL, "pg", "", "PostgreSQL URL whose role has CREATEDB (default: start a throwaway cluster, fsync on)")
	flag.StringVar(&o.pgParams, "pg-params", "", "extra query parameters for the servers' PostgreSQL store URL, e.g. pool_max_conns=32 (pgxpool's default is max(4, CPUs))")
	serveArgs := flag.String("serve-args", "", "extra flags for every idem serve, space-separated, e.g. --replay-cache-mb=64")
	flag.StringVar(&o.outDir, "out", "bench/results", "directory for the JSON and Markdown results")
	flag.IntVar(&o.memory, "memory", 0, "instead of the phases, send N concurrent 1 MiB bodies of many small objects to idem serve --demo on SQLite and report its peak RSS (memory.go)")
	flag.BoolVar(&o.proxy, "proxy", false, "instead of the phases, measure idem proxy on each store of --stores (default sqlite,pg) against calling a Go upstream directly (proxy.go)")
	flag.BoolVar(&o.gateway, "gateway", false, "instead of the phases, measure idem gateway on each store of --stores (default sqlite) against calling a go-sdk MCP upstream directly (gateway.go)")
	flag.BoolVar(&o.tracing, "tracing", false, "run the servers with tracing on: OTEL_* set to export every span over OTLP/HTTP to a sink in the harness (tracing.go)")
	flag.IntVar(&topStatements, "pg-statements", 5, "statements listed per PostgreSQL phase in its explanation, costliest first (pg_stat_statements; 0: all)")
	flag.BoolVar(&o.quick, "quick", false, "quick mode for development: 2s phases, 16 clients (unless set explicitly)")
	flag.Parse()
	o.serve = strings.Fields(*serveArgs)
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["duration"] {
			o.duration = 2 * time.Second
		}
		if !set["clients"] {
			o.clients = 16
		}
	}
	switch {
	case set["stores"]:
	case o.proxy:
		stores = "sqlite,pg"
	case o.gateway:
		stores = "sqlite"
	}
	for _, s := range strings.Split(stores, ",") {
		switch s = strings.TrimSpace(s); s {
		case "sqlite", "pg", "pg2":
			o.stores = append(o.stores, s)
		case "":
		default:
			fatalf("bench: --stores: unknown store %q (want sqlite, pg, pg2)", s)
		}
	}
	if o.clients < 1 || o.storm < 1 || o.duration <= 0 || o.prefill < 0 || o.memory < 0 {
		fatalf("bench: --clients, --storm and --duration must be positive, --prefill and --memory not negative")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fatalf("bench: %v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// run benchmarks every store and writes the results.
func run(ctx context.Context, o options) error {
	tmp, err := os.MkdirTemp("", "idem-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if o.binary == "" {
		o.binary = filepath.Join(tmp, "idem")
		progressf("building idem")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.binary, "./cmd/idem")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/idem: %w", err)
		}
	}
	var sink *traceSink
	if o.tracing {
		if sink, err = startTraceSink(); err != nil {
			return err
		}
	}
	if o.memory > 0 {
		return runMemory(ctx, o, tmp)
	}
	res := Results{
		Started:  time.Now().UTC(),
		Command:  strings.Join(append([]string{"go run ./bench"}, os.Args[1:]...), " "),
		Machine:  machine(),
		Clients:  o.clients,
		Duration: o.duration.String(),
		Storm:    o.storm,
		Prefill:  o.prefill,
		PGParams: o.pgParams,
		Durability: "SQLite: journal_mode=WAL, synchronous=FULL (the store's own pragmas). " +
			"PostgreSQL: fsync=on, synchronous_commit=on, full_page_writes=on.",
	}
	var cluster *pgCluster
	pgURL := o.pgURL
	needPG := false
	for _, s := range o.stores {
		needPG = needPG || s != "sqlite"
	}
	if needPG && pgURL == "" {
		progressf("starting a throwaway PostgreSQL cluster (fsync on)")
		if cluster, err = startCluster(ctx, tmp); err != nil {
			return err
		}
		defer cluster.stop()
		pgURL = cluster.url
		res.PostgreSQL = cluster.version
		o.dbPID = postmasterPID(filepath.Join(cluster.dir, "data"))
	}
	if o.proxy {
		if res.Proxy, err = runProxy(ctx, o, tmp, pgURL); err != nil {
			return err
		}
	}
	if o.gateway {
		if res.Gateway, err = runGateway(ctx, o, tmp, pgURL); err != nil {
			return err
		}
	}
	if o.proxy || o.gateway {
		o.stores = nil
	}
	for _, s := range o.stores {
		if err := ctx.Err(); err != nil {
			return err
		}
		sr, err := benchStore(ctx, o, s, tmp, pgURL)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		res.Stores = append(res.Stores, sr)
	}
	progressDone()
	if sink != nil {
		if res.Tracing, err = sink.summary(); err != nil {
			return err
		}
	}
	md := res.markdown()
	fmt.Print(md)
	return res.write(o.outDir, md)
}

// Results is one run of the harness, as written to bench/results.
type Results struct {
	Started    time.Time     `json:"started"`
	Command    string        `json:"command"`
	Machine    Machine       `json:"machine"`
	PostgreSQL string        `json:"postgresql,omitempty"`
	PGParams   string        `json:"pgStoreParams,omitempty"`
	Durability string        `json:"durability"`
	Clients    int           `json:"clients"`
	Duration   string        `json:"phaseDuration"`
	Storm      int           `json:"stormRequests"`
	Prefill    int           `json:"prefilledKeys,omitempty"`
	Stores     []StoreResult `json:"stores"`
	Proxy      []ProxyRow    `json:"proxy,omitempty"`   // the proxy mode (--proxy)
	Gateway    []ProxyRow    `json:"gateway,omitempty"` // the gateway mode (--gateway)
	Tracing    string        `json:"tracing,omitempty"` // --tracing: what the servers exported
}

// Machine describes where the run happened.
type Machine struct {
	CPUs     int    `json:"nproc"`
	CPUModel string `json:"cpuModel"`
	MemTotal string `json:"memTotal"`
	GoOS     string `json:"goos"`
	Go       string `json:"go"`
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoOS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(v)
			}
		}
	}
	return m
}

func (r Results) write(dir, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, r.Started.Format("20060102T150405Z"))
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(base+".md", []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s.json and %s.md\n", base, base)
	return nil
}
