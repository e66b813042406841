package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The proxy mode (--proxy) measures what `idem proxy` (SPEC §15) adds in
// front of an HTTP API: a small Go upstream runs as a process of its own
// (the harness re-executed with upstreamEnv set, so that its CPU is read
// apart from the proxy's and the load generator's), and the same clients
// call it directly and through `idem proxy` on each store of --stores, one
// phase each: a read (fresh_read), a write without a key (direct only), a
// first keyed call and a replay. See bench/README.md.

// upstreamEnv, when set, makes the harness the upstream of the proxy mode
// instead of the harness.
const upstreamEnv = "IDEM_BENCH_UPSTREAM"

// upstreamDocument is the upstream's OpenAPI 3.1 document: getItem is a
// fresh_read by its method, createItem declares same_key_replay.
const upstreamDocument = `{
  "openapi": "3.1.0",
  "info": {"title": "bench items", "version": "1"},
  "paths": {
    "/items/{id}": {
      "get": {
        "operationId": "getItem", "summary": "Show one item.",
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "the item"}}
      }
    },
    "/items": {
      "post": {
        "operationId": "createItem", "summary": "Create an item.",
        "x-idem-agent-retry": {"kind": "same_key_replay", "reconcile": "getItem",
          "rationale": "Creates an item; the same key replays the original answer."},
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "properties": {"name": {"type": "string", "minLength": 1}},
          "required": ["name"], "additionalProperties": false}}}},
        "responses": {"201": {"description": "created"}}
      }
    }
  }
}`

// upstreamMain serves the upstream on a free port of 127.0.0.1 and prints
// `listening on http://ADDR` on stderr, as idem does. It keeps nothing:
// each answer is a few bytes of JSON, so that it is never the bottleneck.
func upstreamMain() {
	var next atomic.Int64
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, upstreamDocument)
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, `{"id":`+strconv.Quote(r.PathValue("id"))+`,"name":"bench"}`)
	})
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		answer(w, http.StatusCreated, `{"id":"it_`+strconv.FormatInt(next.Add(1), 10)+`","name":"bench"}`)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("bench upstream: %v", err)
	}
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())
	fatalf("bench upstream: %v", http.Serve(ln, mux))
}

// startUpstream re-executes the harness as the upstream.
func startUpstream(ctx context.Context) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), upstreamEnv+"=1")
	return startProcess(ctx, cmd, "the bench upstream")
}

// ProxyRow is one phase of the proxy mode. Row's server CPU and RSS are
// the proxy's (none on the direct rows), and its AddedP99Ms is the p99
// over the direct row of the same method.
type ProxyRow struct {
	Via string `json:"via"` // direct, or the proxy's store: sqlite, pg, pg2
	Row
	UpstreamCPUPerReqUs float64 `json:"upstreamCpuPerRequestUs,omitempty"`
	// AddedP50Ms is the row's p50 minus the p50 of the direct row of the
	// same method (get, or post for first and replay).
	AddedP50Ms float64 `json:"addedP50Ms,omitempty"`
	VsDirect   float64 `json:"ratioToDirect,omitempty"`
}

// proxyPhaseTitles names the phases of the proxy mode.
var proxyPhaseTitles = map[string]string{
	"get":    "GET /items/{id} (fresh_read)",
	"post":   "POST /items, no key",
	"first":  "POST /items, a new Idempotency-Key each (first keyed call)",
	"replay": "POST /items, a key completed in `first` (replay)",
}

// runProxy starts the upstream, measures the direct rows, then runs each
// store's proxy in front of the same upstream.
func runProxy(ctx context.Context, o options, tmp, pgAdmin string) ([]ProxyRow, error) {
	progressf("proxy: starting the upstream")
	up, err := startUpstream(ctx)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	upPID := up.cmd.Process.Pid
	client := newClient(o.clients)
	defer client.CloseIdleConnections()
	warm := min(o.duration/4, 2*time.Second)

	// measure runs one phase and reads the proxies', the upstream's and
	// the database's CPU around it.
	measure := func(via, phaseName string, proxies []*server, stat func() dbSample, do func(ctx context.Context, w, i int) error) ProxyRow {
		before, upBefore, dbBefore := procTotal(proxies), readProc(upPID), stat()
		p := drive(ctx, "proxy "+via+" "+phaseName, o.clients, o.duration, do)
		after, upAfter, dbAfter := procTotal(proxies), readProc(upPID), stat()
		r := ProxyRow{Via: via, Row: newRow(phaseName, p)}
		addDB(&r.Row, dbBefore, dbAfter)
		if p.requests > 0 {
			if len(proxies) > 0 {
				r.CPUPerReqUs = float64((after.cpu - before.cpu).Microseconds()) / float64(p.requests)
				r.RSSMB = float64(after.rss) / (1 << 20)
			}
			r.UpstreamCPUPerReqUs = float64((upAfter.cpu - upBefore.cpu).Microseconds()) / float64(p.requests)
		}
		return r
	}

	var rows []ProxyRow
	drive(ctx, "proxy direct warm-up", o.clients, warm, func(ctx context.Context, w, i int) error {
		_, err := get(ctx, client, fmt.Sprintf("%s/items/warm-%d-%d", up.url, w, i))
		return err
	})
	directGet := measure("direct", "get", nil, loadSample, func(ctx context.Context, w, i int) error {
		r, err := get(ctx, client, fmt.Sprintf("%s/items/it-%d-%d", up.url, w, i))
		return expect(r, err, 200, false)
	})
	directPost := measure("direct", "post", nil, loadSample, func(ctx context.Context, w, i int) error {
		r, err := post(ctx, client, up.url+"/items", "", "", itemBody(fmt.Sprintf("d-%d-%d", w, i)), false)
		return expect(r, err, 201, false)
	})
	rows = append(rows, directGet, directPost)

	for _, name := range o.stores {
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		more, err := proxyStore(ctx, o, name, tmp, pgAdmin, up.url, client, warm, measure)
		if err != nil {
			return rows, fmt.Errorf("proxy %s: %w", name, err)
		}
		rows = append(rows, more...)
	}
	for i := range rows {
		direct := directPost
		if rows[i].Phase == "get" {
			direct = directGet
		}
		if rows[i].Via == "direct" {
			continue
		}
		rows[i].AddedP50Ms = rows[i].P50Ms - direct.P50Ms
		rows[i].AddedP99Ms = rows[i].P99Ms - direct.P99Ms
		if direct.PerSecond > 0 {
			rows[i].VsDirect = rows[i].PerSecond / direct.PerSecond
		}
	}
	return rows, nil
}

// proxyStore runs `idem proxy` on one store (two instances sharing the
// database for pg2, sent requests alternately) and measures the proxied
// read, first keyed calls and replays.
func proxyStore(ctx context.Context, o options, name, tmp, pgAdmin, upstream string, client *http.Client, warm time.Duration,
	measure func(via, phaseName string, proxies []*server, stat func() dbSample, do func(ctx context.Context, w, i int) error) ProxyRow) ([]ProxyRow, error) {
	dir := filepath.Join(tmp, "proxy-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The tokens file accepts the harness's token (an agent of org bench).
	sum := sha256.Sum256([]byte(token))
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("sha256:"+hex.EncodeToString(sum[:])+" bench bench-agent agent\n"), 0o600); err != nil {
		return nil, err
	}
	instances := 1
	storeURL := "sqlite:" + filepath.Join(dir, "idem.db")
	stat := loadSample
	if name != "sqlite" {
		var err error
		if storeURL, err = createDatabase(ctx, pgAdmin, "idem_bench_"+name); err != nil {
			return nil, err
		}
		conn, err := pgx.Connect(ctx, storeURL)
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.Background())
		stat = func() dbSample { return sampleDB(ctx, conn, o.dbPID) }
		if o.pgParams != "" {
			sep := "?"
			if strings.Contains(storeURL, "?") {
				sep = "&"
			}
			storeURL += sep + o.pgParams
		}
		if name == "pg2" {
			instances = 2
		}
	}
	progressf("proxy %s: starting %d idem proxy instance(s)", name, instances)
	var proxies []*server
	defer func() {
		for _, p := range proxies {
			p.stop()
		}
	}()
	for range instances {
		args := append([]string{"proxy", "--upstream", upstream, "--openapi", "/openapi.json", "--tokens-file", tokens,
			"--addr", "127.0.0.1:0", "--store", storeURL, "--secret-key-file", filepath.Join(dir, "idem.key")}, o.serve...)
		cmd := exec.Command(o.binary, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=", "IDEM_UPSTREAM=", "IDEM_TOKENS_FILE=")
		p, err := startProcess(ctx, cmd, "idem proxy")
		if err != nil {
			return nil, err
		}
		proxies = append(proxies, p)
	}
	base := func(w, i int) string { return proxies[(w+i)%len(proxies)].url }

	drive(ctx, "proxy "+name+" warm-up", o.clients, warm, func(ctx context.Context, w, i int) error {
		_, err := get(ctx, client, fmt.Sprintf("%s/items/warm-%d-%d", base(w, i), w, i))
		return err
	})
	read := measure(name, "get", proxies, stat, func(ctx context.Context, w, i int) error {
		r, err := get(ctx, client, fmt.Sprintf("%s/items/it-%d-%d", base(w, i), w, i))
		return expect(r, err, 200, false)
	})
	keys := make([][]string, o.clients)
	first := measure(name, "first", proxies, stat, func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("p-%d-%d", w, i)
		r, err := post(ctx, client, base(w, i)+"/items", "bench-"+k, "", itemBody(k), false)
		if err := expect(r, err, 201, false); err != nil {
			return err
		}
		keys[w] = append(keys[w], k)
		return nil
	})
	var all []string
	for _, k := range keys {
		all = append(all, k...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no first keyed call succeeded: %s", first.FirstError)
	}
	replay := measure(name, "replay", proxies, stat, func(ctx context.Context, w, i int) error {
		own := keys[w]
		if len(own) == 0 {
			own = all
		}
		k := own[i%len(own)]
		r, err := post(ctx, client, base(w, i)+"/items", "bench-"+k, "", itemBody(k), false)
		return expect(r, err, 201, true)
	})
	return []ProxyRow{read, first, replay}, nil
}

// itemBody is createItem's input.
func itemBody(name string) []byte {
	return []byte(`{"name":"` + name + `"}`)
}

// get sends one GET with the harness's token.
func get(ctx context.Context, c *http.Client, url string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	if resp.StatusCode >= 300 {
		r.body, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	return r, err
}

// proxyMarkdown renders the proxy mode's rows.
func proxyMarkdown(b *strings.Builder, rows []ProxyRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("### idem proxy against calling the upstream directly\n\n")
	b.WriteString("The upstream is a Go net/http server of its own process (bench/proxy.go); \"over direct\" is the row's p50 (p99) minus the direct row's of the same method (GET, or POST without a key).\n\n")
	b.WriteString("| via | phase | req/s | ×direct | p50 ms | p99 ms | p99.9 ms | p50 over direct ms | p99 over direct ms | proxy CPU µs/req | upstream CPU µs/req | DB CPU µs/req | load CPU µs/req | proxy RSS MB | errors |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		via := "direct"
		if r.Via != "direct" {
			via = "idem proxy, " + storeTitle(StoreResult{Store: r.Via})
		}
		added := func(v float64) string {
			if r.Via == "direct" {
				return ""
			}
			return fmt.Sprintf("%+.2f", v)
		}
		fmt.Fprintf(b, "| %s | %s | %.0f | %s | %.2f | %.2f | %.2f | %s | %s | %s | %.0f | %s | %s | %s | %d |\n",
			via, proxyPhaseTitles[r.Phase], r.PerSecond, blank(r.VsDirect, "%.2f"), r.P50Ms, r.P99Ms, r.P999Ms,
			added(r.AddedP50Ms), added(r.AddedP99Ms), blank(r.CPUPerReqUs, "%.0f"), r.UpstreamCPUPerReqUs,
			blank(r.DBCPUPerReqUs, "%.0f"), blank(r.LoadCPUPerReqUs, "%.0f"), blank(r.RSSMB, "%.0f"), r.Errors)
	}
	for _, r := range rows {
		if r.FirstError != "" {
			fmt.Fprintf(b, "\nproxy %s %s, first error: `%.200s`\n", r.Via, r.Phase, r.FirstError)
		}
	}
}
