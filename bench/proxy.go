package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
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

// ProxyRow is one phase of the proxy mode. Row's server CPU and RSS are
// the proxy's (none on the direct rows), and its AddedP99Ms is the p99
// over the direct row of the same method.
type ProxyRow struct {
	Via string `json:"via"` // direct, or the proxy's store: sqlite, pg, pg2
	Row
	UpstreamCPUPerReqUs float64 `json:"upstreamCpuPerRequestUs,omitempty"`
	// UpstreamConnsPerReq is the TCP connections the phase opened to the
	// upstream, per request (the gateway mode's upstream counts them).
	UpstreamConnsPerReq float64 `json:"upstreamConnectionsPerRequest,omitempty"`
	// FrontAllocBytesPerReq and FrontAllocsPerReq are what the fronts' Go
	// runtimes allocated over the phase, per request (their /metrics).
	FrontAllocBytesPerReq float64 `json:"frontAllocBytesPerRequest,omitempty"`
	FrontAllocsPerReq     float64 `json:"frontAllocsPerRequest,omitempty"`
	// StoreCallsPerReq, WriteTxPerReq and WriteCallsPerReq are the fronts'
	// store calls (every method), the write transactions their stores ran
	// (group commit: each carries one or more write calls) and the write
	// calls, per request (their /metrics).
	StoreCallsPerReq float64 `json:"storeCallsPerRequest,omitempty"`
	WriteTxPerReq    float64 `json:"writeTransactionsPerRequest,omitempty"`
	WriteCallsPerReq float64 `json:"writeCallsPerRequest,omitempty"`
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
	run, err := startFrontRun(ctx, o, upstreamEnv, "the bench upstream")
	if err != nil {
		return nil, err
	}
	defer run.close()
	m, client, up := run.m, run.hc, run.up

	var rows []ProxyRow
	drive(ctx, "proxy direct warm-up", o.clients, run.warm, func(ctx context.Context, w, i int) error {
		_, err := get(ctx, client, fmt.Sprintf("%s/items/warm-%d-%d", up.url, w, i))
		return err
	})
	directGet := m.measure(ctx, "direct", "get", 0, nil, loadSample, func(ctx context.Context, w, i int) error {
		r, err := get(ctx, client, fmt.Sprintf("%s/items/it-%d-%d", up.url, w, i))
		return expect(r, err, 200, false)
	})
	directPost := m.measure(ctx, "direct", "post", 0, nil, loadSample, func(ctx context.Context, w, i int) error {
		r, err := post(ctx, client, up.url+"/items", "", "", itemBody(fmt.Sprintf("d-%d-%d", w, i)), false)
		return expect(r, err, 201, false)
	})
	rows = append(rows, directGet, directPost)

	for _, name := range o.stores {
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		more, err := proxyStore(ctx, o, name, tmp, pgAdmin, run)
		if err != nil {
			return rows, fmt.Errorf("proxy %s: %w", name, err)
		}
		rows = append(rows, more...)
	}
	relate(rows, map[string]string{"get": "get", "first": "post", "replay": "post"})
	return rows, nil
}

// proxyStore runs `idem proxy` on one store (two instances sharing the
// database for pg2, sent requests alternately) and measures the proxied
// read, first keyed calls and replays.
func proxyStore(ctx context.Context, o options, name, tmp, pgAdmin string, run *frontRun) ([]ProxyRow, error) {
	m, client := run.m, run.hc
	fs, err := openFrontStore(ctx, o, "proxy", name, tmp, pgAdmin)
	if err != nil {
		return nil, err
	}
	defer fs.close()
	progressf("proxy %s: starting %d idem proxy instance(s)", name, fs.instances)
	proxies, err := fs.start(ctx, o, "proxy", "--upstream", run.up.url, "--openapi", "/openapi.json")
	defer stopAll(proxies)
	if err != nil {
		return nil, err
	}
	base := func(w, i int) string { return proxies[(w+i)%len(proxies)].url }

	drive(ctx, "proxy "+name+" warm-up", o.clients, run.warm, func(ctx context.Context, w, i int) error {
		_, err := get(ctx, client, fmt.Sprintf("%s/items/warm-%d-%d", base(w, i), w, i))
		return err
	})
	read := fs.explain(ctx, "proxy "+name, func() ProxyRow {
		return m.measure(ctx, name, "get", 0, proxies, fs.stat, func(ctx context.Context, w, i int) error {
			r, err := get(ctx, client, fmt.Sprintf("%s/items/it-%d-%d", base(w, i), w, i))
			return expect(r, err, 200, false)
		})
	})
	keys := make([][]string, o.clients)
	first := fs.explain(ctx, "proxy "+name, func() ProxyRow {
		return m.measure(ctx, name, "first", 0, proxies, fs.stat, func(ctx context.Context, w, i int) error {
			k := fmt.Sprintf("p-%d-%d", w, i)
			r, err := post(ctx, client, base(w, i)+"/items", "bench-"+k, "", itemBody(k), false)
			if err := expect(r, err, 201, false); err != nil {
				return err
			}
			keys[w] = append(keys[w], k)
			return nil
		})
	})
	var all []string
	for _, k := range keys {
		all = append(all, k...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no first keyed call succeeded: %s", first.FirstError)
	}
	replay := fs.explain(ctx, "proxy "+name, func() ProxyRow {
		return m.measure(ctx, name, "replay", 0, proxies, fs.stat, func(ctx context.Context, w, i int) error {
			own := keys[w]
			if len(own) == 0 {
				own = all
			}
			k := own[i%len(own)]
			r, err := post(ctx, client, base(w, i)+"/items", "bench-"+k, "", itemBody(k), false)
			return expect(r, err, 201, true)
		})
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

// proxyTable renders the proxy mode's rows.
var proxyTable = frontTable{
	heading: "idem proxy against calling the upstream directly",
	intro:   "The upstream is a Go net/http server of its own process (bench/proxy.go); \"over direct\" is the row's p50 (p99) minus the direct row's of the same method (GET, or POST without a key).",
	front:   "idem proxy",
	short:   "proxy",
	titles:  proxyPhaseTitles,
}
