package proxy_test

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/sqlitestore"
)

// TestUpstreamNotRunAnswersFreeTheKey: an upstream 429, or a 503 with
// Retry-After, says the request was not run: the caller gets that answer
// with its Retry-After, nothing is stored, and the same key runs again
// later (issue 28, Low). A 503 without Retry-After stays indeterminate.
func TestUpstreamNotRunAnswersFreeTheKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter string
		freed      bool
	}{
		{"429 with Retry-After", 429, "7", true},
		{"429 without Retry-After", 429, "", true},
		{"503 with Retry-After", 503, "3", true},
		{"503 without Retry-After", 503, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first atomic.Bool
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if first.CompareAndSwap(false, true) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(`{"error":"busy"}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(201)
				_, _ = w.Write([]byte(`{"id":"t1"}`))
			})
			f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
			built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler})
			if err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, built.Operations)
			call := func() idem.Result {
				return r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
					Key: "k-busy", Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
			}
			res := call()
			if res.Status != tc.status || string(res.Body()) != `{"error":"busy"}` || res.Header.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("first call: %d %s Retry-After %q, want the upstream's %d with Retry-After %q", res.Status, res.Body(), res.Header.Get("Retry-After"), tc.status, tc.retryAfter)
			}
			again := call()
			if !tc.freed {
				if again.Status != 409 || problemOf(t, again).Code != idem.CodeIdempotencyResultIndeterminate || up.count.Load() != 1 {
					t.Fatalf("same key after a 503 without Retry-After: %d %s (upstream calls %d), want indeterminate", again.Status, again.Body(), up.count.Load())
				}
				return
			}
			if again.Status != 201 || again.Replayed || up.count.Load() != 2 {
				t.Fatalf("same key after the upstream's %d: %d %s replayed=%v, upstream calls %d; want a new execution", tc.status, again.Status, again.Body(), again.Replayed, up.count.Load())
			}
			if replay := call(); !replay.Replayed || replay.Status != 201 || up.count.Load() != 2 {
				t.Fatalf("a third call: %d replayed=%v, upstream calls %d", replay.Status, replay.Replayed, up.count.Load())
			}
		})
	}
}

const headerDoc = `openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /things:
    get:
      operationId: listThings
      responses: {'200': {description: ok}}
    post:
      operationId: createThing
      x-idem-agent-retry: {kind: same_key_replay, reconcile: listThings, rationale: By key.}
      parameters:
        - {name: X-Tenant, in: header, required: true, schema: {type: string, minLength: 1}}
        - {name: x-priority, in: header, schema: {type: integer}}
        - {name: Accept, in: header, schema: {type: string}}
      requestBody:
        required: true
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {'201': {description: ok}}
`

// TestHeaderParametersAreInputs: an OpenAPI operation's in: header
// parameters are declared header inputs (issue 28, Low): validated, part
// of the fingerprint (two calls differing only in one are two intents, so
// a key reused across them is 422), and forwarded, from MCP's arguments
// too. Accept, which OpenAPI says to ignore as a parameter, is no input.
func TestHeaderParametersAreInputs(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"tenant":"` + r.Header.Get("X-Tenant") + `"}`))
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, headerDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	d, ok := r.Describe("createThing")
	if !ok {
		t.Fatal("no createThing")
	}
	var headers []string
	for _, p := range d.Params {
		if p.In == "header" {
			headers = append(headers, p.Name+"="+p.Header)
		}
	}
	if strings.Join(headers, ",") != "X-Tenant=X-Tenant,x-priority=X-Priority" {
		t.Fatalf("header inputs %v, want X-Tenant and x-priority", headers)
	}
	overHTTP := func(key string, h http.Header) idem.Result {
		h = h.Clone()
		h.Set("Content-Type", "application/json")
		declared := http.Header{}
		for _, name := range []string{"X-Tenant", "X-Priority"} {
			if vs := h.Values(name); len(vs) > 0 {
				declared[name] = vs
			}
		}
		return r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent, Key: key,
			Intent: idem.Intent{Header: declared, Passthrough: h, ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
	}
	if res := overHTTP("k-h", http.Header{"X-Tenant": {"acme"}}); res.Status != 201 || up.last(t).header.Get("X-Tenant") != "acme" {
		t.Fatalf("first call: %d %s, upstream got X-Tenant %q", res.Status, res.Body(), up.last(t).header.Get("X-Tenant"))
	}
	if res := overHTTP("k-h", http.Header{"X-Tenant": {"globex"}}); res.Status != 422 || problemOf(t, res).Code != idem.CodeIdempotencyKeyReused {
		t.Fatalf("the same key with another X-Tenant: %d %s, want 422 IDEMPOTENCY_KEY_REUSED", res.Status, res.Body())
	}
	if res := overHTTP("k-h", http.Header{"X-Tenant": {"acme"}, "Accept": {"text/plain"}}); !res.Replayed || up.count.Load() != 1 {
		t.Fatalf("the same request again (another Accept): %d %s replayed=%v, upstream calls %d", res.Status, res.Body(), res.Replayed, up.count.Load())
	}
	if res := overHTTP("k-h2", http.Header{"X-Priority": {"high"}}); res.Status != 400 || !slices.Equal(problemOf(t, res).errorPaths(), []string{"/X-Tenant", "/x-priority"}) {
		t.Fatalf("a missing X-Tenant and a non-integer X-Priority: %d %s", res.Status, res.Body())
	}
	// Over MCP the header input is an argument, placed in Intent.Header:
	// it reaches the upstream as the header.
	res := r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceMCP, Principal: agent, Key: "k-mcp",
		Intent: idem.Intent{Header: http.Header{"X-Tenant": {"initech"}}, Body: []byte(`{"name":"a"}`)}})
	if res.Status != 201 || up.last(t).header.Get("X-Tenant") != "initech" {
		t.Fatalf("over MCP: %d %s, upstream got X-Tenant %q", res.Status, res.Body(), up.last(t).header.Get("X-Tenant"))
	}
}

// TestProxiesOfDifferentUpstreamsShareNoRecords: two proxies on one store
// in front of different upstreams never answer each other's keys (issue
// 28, Low): the same key and request on the second is another intent
// (422, as another route would be), not a replay of the first upstream's
// answer. Two proxies of one upstream (instances, a restart) share keys,
// whatever the spelling of its URL.
func TestProxiesOfDifferentUpstreamsShareNoRecords(t *testing.T) {
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	x := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"upstream":"x"}`))
	})
	y := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"upstream":"y"}`))
	})
	proxyOf := func(upstream string) *pipeline.Runner {
		f := &proxy.Forwarder{Upstream: mustURL(t, upstream), Client: proxy.NewClient()}
		built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler, Upstream: f.Upstream})
		if err != nil {
			t.Fatal(err)
		}
		reg, err := idem.NewRegistry(built.Operations...)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pipeline.New(reg, pipeline.Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	call := func(r *pipeline.Runner) idem.Result {
		return r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
			Key: "k-shared", Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
	}
	a, b := proxyOf(x.URL), proxyOf(y.URL)
	if res := call(a); res.Status != 201 || string(res.Body()) != `{"upstream":"x"}` {
		t.Fatalf("proxy A: %d %s", res.Status, res.Body())
	}
	if res := call(b); res.Status != 422 || problemOf(t, res).Code != idem.CodeIdempotencyKeyReused || y.count.Load() != 0 {
		t.Fatalf("proxy B (another upstream), the same key and request: %d %s replayed=%v; want 422 IDEMPOTENCY_KEY_REUSED", res.Status, res.Body(), res.Replayed)
	}
	// Another instance of A, its upstream spelled with a trailing slash
	// and an upper-case scheme: the same upstream, one record.
	again := proxyOf("HTTP://" + strings.TrimPrefix(x.URL, "http://") + "/")
	if res := call(again); res.Status != 201 || !res.Replayed || x.count.Load() != 1 {
		t.Fatalf("another instance of A: %d %s replayed=%v, upstream X calls %d; want the replay", res.Status, res.Body(), res.Replayed, x.count.Load())
	}
}
