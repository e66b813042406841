package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A front is idem in front of an upstream the harness runs: `idem proxy`
// before an HTTP API (proxy.go) or `idem gateway` before an MCP server
// (gateway.go). Both modes call the upstream directly and through the
// front with the same clients, and report ProxyRows side by side; this
// file is what they share.

// frontRun is what a front mode's run holds: its upstream, the meter of
// its phases, the clients' HTTP client and the length of a warm-up.
type frontRun struct {
	up   *server
	m    meter
	hc   *http.Client
	warm time.Duration
}

// startFrontRun re-executes the harness with env set, as the upstream in a
// process of its own (so that its CPU is read apart from the front's and
// the load generator's); what names it in errors. The caller closes it.
func startFrontRun(ctx context.Context, o options, env, what string) (*frontRun, error) {
	progressf("starting %s", what)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), env+"=1")
	up, err := startProcess(ctx, cmd, what)
	if err != nil {
		return nil, err
	}
	hc := newClient(o.clients)
	return &frontRun{up: up, m: meter{clients: o.clients, duration: o.duration, upPID: up.cmd.Process.Pid, hc: hc},
		hc: hc, warm: min(o.duration/4, 2*time.Second)}, nil
}

// close stops the upstream and closes the clients' idle connections.
func (r *frontRun) close() {
	r.hc.CloseIdleConnections()
	r.up.stop()
}

// frontStore is one store of --stores prepared for a front: a directory,
// a tokens file accepting the harness's token, the store's URL and how to
// sample its database around a phase.
type frontStore struct {
	name      string // sqlite, pg or pg2
	dir       string
	tokens    string
	url       string
	instances int // 2 for pg2: two fronts share the database
	stat      func() dbSample
	close     func()
	conn      *pgx.Conn // PostgreSQL: the harness's own connection to the database
	connURL   string    // and its URL (without --pg-params)
}

// openFrontStore prepares the store name in tmp/mode-name (a fresh
// database on pgAdmin for pg and pg2).
func openFrontStore(ctx context.Context, o options, mode, name, tmp, pgAdmin string) (*frontStore, error) {
	fs := &frontStore{name: name, dir: filepath.Join(tmp, mode+"-"+name), instances: 1, stat: loadSample, close: func() {}}
	if err := os.MkdirAll(fs.dir, 0o755); err != nil {
		return nil, err
	}
	// The tokens file accepts the harness's token (an agent of org bench).
	sum := sha256.Sum256([]byte(token))
	fs.tokens = filepath.Join(fs.dir, "tokens")
	if err := os.WriteFile(fs.tokens, []byte("sha256:"+hex.EncodeToString(sum[:])+" bench bench-agent agent\n"), 0o600); err != nil {
		return nil, err
	}
	if name == "sqlite" {
		fs.url = "sqlite:" + filepath.Join(fs.dir, "idem.db")
		return fs, nil
	}
	var err error
	if fs.url, err = createDatabase(ctx, pgAdmin, "idem_bench_"+name); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, fs.url)
	if err != nil {
		return nil, err
	}
	fs.close = func() { conn.Close(context.Background()) }
	fs.stat = func() dbSample { return sampleDB(ctx, conn, o.dbPID) }
	fs.conn, fs.connURL = conn, fs.url
	enableStatements(ctx, conn)
	if o.pgParams != "" {
		sep := "?"
		if strings.Contains(fs.url, "?") {
			sep = "&"
		}
		fs.url += sep + o.pgParams
	}
	if name == "pg2" {
		fs.instances = 2
	}
	return fs, nil
}

// start runs the front's instances: `idem ARGS` with the store, the
// tokens file, a free port, a key file and --serve-args, in the store's
// directory and without idem's variables from the harness's environment.
// The caller stops them, also on error.
func (fs *frontStore) start(ctx context.Context, o options, args ...string) ([]*server, error) {
	var fronts []*server
	for range fs.instances {
		all := append(append([]string{}, args...), "--tokens-file", fs.tokens, "--addr", "127.0.0.1:0",
			"--store", fs.url, "--secret-key-file", filepath.Join(fs.dir, "idem.key"))
		cmd := exec.Command(o.binary, append(all, o.serve...)...)
		cmd.Dir = fs.dir
		cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=", "IDEM_UPSTREAM=", "IDEM_TOKENS_FILE=")
		f, err := startProcess(ctx, cmd, "idem "+args[0])
		if err != nil {
			return fronts, err
		}
		fronts = append(fronts, f)
	}
	return fronts, nil
}

// explain runs measure and, on PostgreSQL, adds to its row what explains
// the phase (pgwhy.go), printed as a progress line under label.
func (fs *frontStore) explain(ctx context.Context, label string, measure func() ProxyRow) ProxyRow {
	if fs.conn == nil {
		return measure()
	}
	before, waits := samplePGWhy(ctx, fs.conn), sampleWaits(ctx, fs.connURL)
	r := measure()
	w := waits.result()
	addWhy(&r.Row, before, samplePGWhy(ctx, fs.conn), w)
	progressf("%s %s", label, whyLine(r.Row))
	return r
}

// stopAll stops every server of servers.
func stopAll(servers []*server) {
	for _, s := range servers {
		s.stop()
	}
}

// meter runs the phases of a front mode and reads the fronts', the
// upstream's and the database's CPU around each.
type meter struct {
	clients  int
	duration time.Duration
	upPID    int          // the upstream process
	hc       *http.Client // reads the fronts' GET /metrics
}

// measure runs one phase (paced at rate requests/s unless 0) against the
// fronts (none for a direct row) and returns its row.
func (m meter) measure(ctx context.Context, via, phaseName string, rate float64, fronts []*server, stat func() dbSample,
	do func(ctx context.Context, w, i int) error) ProxyRow {
	var bases []string
	for _, f := range fronts {
		bases = append(bases, f.url)
	}
	scBefore := scrapeCounts(ctx, m.hc, bases) // one GET /metrics a front, before and after
	before, upBefore, dbBefore := procTotal(fronts), readProc(m.upPID), stat()
	p := drivePaced(ctx, via+" "+phaseName, m.clients, m.duration, rate, do)
	after, upAfter, dbAfter := procTotal(fronts), readProc(m.upPID), stat()
	scAfter := scrapeCounts(ctx, m.hc, bases)
	r := ProxyRow{Via: via, Row: newRow(phaseName, p)}
	if n := float64(p.requests); n > 0 && scBefore.ok && scAfter.ok {
		r.StoreCallsPerReq = (scAfter.storeCalls - scBefore.storeCalls) / n
		r.WriteTxPerReq = (scAfter.writeTx - scBefore.writeTx) / n
		r.WriteCallsPerReq = (scAfter.writeCalls - scBefore.writeCalls) / n
	}
	r.PacedAt = rate
	addDB(&r.Row, dbBefore, dbAfter)
	if p.requests > 0 && scBefore.memstats && scAfter.memstats {
		r.FrontAllocBytesPerReq = (scAfter.allocBytes - scBefore.allocBytes) / float64(p.requests)
		r.FrontAllocsPerReq = (scAfter.mallocs - scBefore.mallocs) / float64(p.requests)
	}
	if p.requests > 0 {
		if len(fronts) > 0 {
			r.CPUPerReqUs = float64((after.cpu - before.cpu).Microseconds()) / float64(p.requests)
			r.RSSMB = float64(after.rss) / (1 << 20)
		}
		r.UpstreamCPUPerReqUs = float64((upAfter.cpu - upBefore.cpu).Microseconds()) / float64(p.requests)
	}
	return r
}

// relate fills each front row's AddedP50Ms, AddedP99Ms and VsDirect from
// the direct row whose phase against names for the row's phase (a row
// with no entry, or whose direct row is missing, is left as it is).
func relate(rows []ProxyRow, against map[string]string) {
	direct := map[string]ProxyRow{}
	for _, r := range rows {
		if r.Via == "direct" {
			direct[r.Phase] = r
		}
	}
	for i := range rows {
		d, ok := direct[against[rows[i].Phase]]
		if rows[i].Via == "direct" || !ok {
			continue
		}
		rows[i].AddedP50Ms = rows[i].P50Ms - d.P50Ms
		rows[i].AddedP99Ms = rows[i].P99Ms - d.P99Ms
		if d.PerSecond > 0 {
			rows[i].VsDirect = rows[i].PerSecond / d.PerSecond
		}
	}
}

// frontTable is how a front mode's rows are rendered.
type frontTable struct {
	heading string            // the table's heading
	intro   string            // a sentence under it
	front   string            // the front's name in the rows: idem proxy, idem gateway
	short   string            // its short name in the CPU columns: proxy, gateway
	titles  map[string]string // phase → what was sent
}

// markdown renders rows as one table, then the first error of each row
// that had errors.
func (t frontTable) markdown(b *strings.Builder, rows []ProxyRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "### %s\n\n%s\n\n", t.heading, t.intro)
	fmt.Fprintf(b, "| via | phase | req/s | ×direct | p50 ms | p99 ms | p99.9 ms | p50 over direct ms | p99 over direct ms | %s CPU µs/req | %s KiB alloc/req | %s allocs/req | %s store calls · write calls · write transactions /req | upstream CPU µs/req | upstream conns/req | DB CPU µs/req | load CPU µs/req | %s RSS MB | errors |\n", t.short, t.short, t.short, t.short, t.short)
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		via := "direct"
		if r.Via != "direct" {
			via = t.front + ", " + storeTitle(StoreResult{Store: r.Via})
		}
		added := func(v float64) string {
			if r.Via == "direct" {
				return ""
			}
			return fmt.Sprintf("%+.2f", v)
		}
		title := t.titles[r.Phase]
		if title == "" {
			title = r.Phase
		}
		if r.PacedAt > 0 {
			title += fmt.Sprintf(", paced at %.0f/s", r.PacedAt)
		}
		counts := ""
		if r.Via != "direct" {
			counts = fmt.Sprintf("%.2f · %.2f · %.2f", r.StoreCallsPerReq, r.WriteCallsPerReq, r.WriteTxPerReq)
		}
		fmt.Fprintf(b, "| %s | %s | %.0f | %s | %.2f | %.2f | %.2f | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %d |\n",
			via, title, r.PerSecond, blank(r.VsDirect, "%.2f"), r.P50Ms, r.P99Ms, r.P999Ms,
			added(r.AddedP50Ms), added(r.AddedP99Ms), blank(r.CPUPerReqUs, "%.0f"),
			blank(r.FrontAllocBytesPerReq/1024, "%.0f"), blank(r.FrontAllocsPerReq, "%.0f"), counts, r.UpstreamCPUPerReqUs, blank(r.UpstreamConnsPerReq, "%.3f"),
			blank(r.DBCPUPerReqUs, "%.0f"), blank(r.LoadCPUPerReqUs, "%.0f"), blank(r.RSSMB, "%.0f"), r.Errors)
	}
	for _, r := range rows {
		if r.FirstError != "" {
			fmt.Fprintf(b, "\n%s %s %s, first error: `%.200s`\n", t.short, r.Via, r.Phase, r.FirstError)
		}
	}
}
