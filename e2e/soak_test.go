package e2e

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak sends mixed traffic across every demo operation for a while
// (5 s; 60 s with -long) from 8 clients: keyed refunds with every fault of
// SPEC §12 and approvals, keyed creates of businesses, webhooks, tokens and
// agreements, webhook triggers to a real receiver, convergent binds and
// limits, intrinsic approvals, previews, reads, same-key retries, and
// clients that give up before the answer. Then: every keyed call's answers
// agree with one another and with a later same-key retry (ledger.observe),
// the gateway ledger holds one execution per request key, no answer was a
// 5xx other than the injected faults, the server's goroutines come back
// to their count before the soak, and its resident memory stays within
// bounds.
func TestSoak(t *testing.T) {
	t.Parallel()
	d := 5 * time.Second
	if longRun() {
		d = 60 * time.Second
	}
	cases := map[string]func(t *testing.T){}
	for name, store := range stores {
		cases[name] = func(t *testing.T) {
			dir := t.TempDir()
			soak(t, store(t, dir), dir, d)
		}
	}
	together(t, cases)
}

func soak(t *testing.T, url, dir string, d time.Duration) {
	var deliveries atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deliveries.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	s := serve(t, url, dir, "--lease-grace", "200ms", "--webhook-loopback")
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	l := &ledger{allFaults: true}
	var calls atomic.Int64

	// plain sends a call without a key: anything but a 5xx or a 400 (the
	// inputs are valid) is fine.
	plain := func(token, method, path, body string) reply {
		calls.Add(1)
		r, err := s.try(method, path, token, body)
		if err != nil {
			t.Errorf("%s %s: %v", method, path, err)
		} else if r.status >= 500 || r.status == 400 || r.status == 401 {
			t.Errorf("%s %s: %d %s", method, path, r.status, r.raw)
		}
		l.tally.add(fmt.Sprintf("unkeyed %d", r.status), 1)
		return r
	}
	keyedCall := func(rng *rand.Rand, token, method, path, body, reconcile string) *keyed {
		k := l.add(&keyed{token: token, key: fmt.Sprintf("soak-%d", rng.Uint64()), method: method, path: path, body: body, reconcile: reconcile})
		calls.Add(1)
		l.send(t, s, k, true)
		return k
	}

	// Each org gets a business and a webhook to the receiver.
	var hooksMu sync.Mutex
	hooks := map[string][]string{} // org token → webhook ids
	for _, token := range []string{"demo-agent", "demo-other-org"} {
		rng := rand.New(rand.NewPCG(seed, 99))
		keyedCall(rng, token, "POST", "/v1/businesses", `{"slug":"soak","name":"Soak"}`, "business.show")
		k := keyedCall(rng, token, "POST", "/v1/businesses/soak/webhooks", `{"url":"`+receiver.URL+`/h","events":["refund.created"]}`, "webhook.list")
		r := s.do(t, "POST", k.path, token, k.body, "Idempotency-Key", k.key).want(t, 201, "")
		hooks[token] = []string{r.get("data.id").(string)}
	}
	orgToken := func(token string) string {
		if token == "demo-other-org" {
			return token
		}
		return "demo-agent"
	}

	ops := []func(rng *rand.Rand, token string, mine *[]*keyed){
		func(rng *rand.Rand, _ string, mine *[]*keyed) { // order.refund, keyed, with faults
			k := l.newRefund(rng, "soak-refund")
			calls.Add(1)
			l.send(t, s, k, true)
			*mine = append(*mine, k)
		},
		func(rng *rand.Rand, _ string, mine *[]*keyed) { // a same-key retry
			if len(*mine) > 0 {
				calls.Add(1)
				l.send(t, s, (*mine)[rng.IntN(len(*mine))], true)
			}
		},
		func(rng *rand.Rand, _ string, mine *[]*keyed) { // a refund that needs approval
			token := []string{"demo-agent", "demo-agent-2"}[rng.IntN(2)]
			k := l.add(&keyed{token: token, key: fmt.Sprintf("soak-%d", rng.Uint64()), method: "POST",
				path: fmt.Sprintf("/v1/orders/ord_%d/refund", 1+rng.IntN(100)), body: `{"amount":6000}`, reconcile: "order.show"})
			calls.Add(1)
			// Another client's same intent may consume the approval first
			// (its pending request is shared): then a new one is needed.
			r, _ := l.send(t, s, k, true)
			for range 5 {
				id, _ := r.get("details.approvalId").(string)
				if id == "" {
					break
				}
				plain("demo-approver", "POST", "/v1/approvals/"+id+"/approve", `{"reason":"soak"}`)
				calls.Add(1)
				r, _ = l.send(t, s, k, true)
			}
			*mine = append(*mine, k)
		},
		func(rng *rand.Rand, token string, mine *[]*keyed) { // business.create, slugs shared
			*mine = append(*mine, keyedCall(rng, token, "POST", "/v1/businesses", fmt.Sprintf(`{"slug":"b%d","name":"B %d"}`, rng.IntN(30), rng.IntN(3)), "business.show"))
		},
		func(rng *rand.Rand, token string, _ *[]*keyed) {
			plain(token, "GET", "/v1/businesses/soak", "")
			plain(token, "GET", "/v1/businesses", "")
		},
		func(rng *rand.Rand, token string, _ *[]*keyed) { // backend.bind, convergent, with previews
			path := fmt.Sprintf("/v1/businesses/soak/backends/be%d?environment=%s", rng.IntN(4), []string{"preview", "production"}[rng.IntN(2)])
			if rng.IntN(3) == 0 {
				path += "&dryRun=true"
			}
			plain(token, "PUT", path, fmt.Sprintf(`{"originUrl":"https://o%d.example.com"}`, rng.IntN(3)))
			plain(token, "GET", "/v1/businesses/soak/backends", "")
		},
		func(rng *rand.Rand, token string, mine *[]*keyed) { // webhook.create, a secret result
			k := keyedCall(rng, token, "POST", "/v1/businesses/soak/webhooks", `{"url":"`+receiver.URL+`/h","events":["payment.failed"]}`, "webhook.list")
			*mine = append(*mine, k)
			plain(token, "GET", "/v1/businesses/soak/webhooks", "")
		},
		func(rng *rand.Rand, token string, mine *[]*keyed) { // webhook.trigger, an external effect
			hooksMu.Lock()
			ids := hooks[orgToken(token)]
			id := ids[rng.IntN(len(ids))]
			hooksMu.Unlock()
			*mine = append(*mine, keyedCall(rng, token, "POST", "/v1/businesses/soak/webhooks/"+id+"/trigger", `{"type":"refund.created"}`, "webhook.deliveries"))
			plain(token, "GET", "/v1/businesses/soak/webhooks/"+id+"/deliveries", "")
		},
		func(rng *rand.Rand, token string, mine *[]*keyed) { // token.mint, a secret result
			*mine = append(*mine, keyedCall(rng, token, "POST", "/v1/tokens", fmt.Sprintf(`{"name":"t%d","scopes":["read"]}`, rng.IntN(5)), "token.list"))
			plain(token, "GET", "/v1/tokens", "")
			plain(token, "POST", "/v1/auth/context-token", "")
		},
		func(rng *rand.Rand, token string, _ *[]*keyed) { // limits, convergent by identity
			sub := fmt.Sprintf("/v1/subscriptions/sub_%d/limits", 1+rng.IntN(5))
			plain(token, "POST", sub, fmt.Sprintf(`{"subject":"s%d","quantity":%d}`, rng.IntN(4), rng.IntN(3)))
			list := plain(token, "GET", sub, "")
			if ls, _ := list.get("data.limits").([]any); len(ls) > 0 {
				id, _ := ls[rng.IntN(len(ls))].(map[string]any)["id"].(string)
				plain(token, "PUT", "/v1/limits/"+id, fmt.Sprintf(`{"quantity":%d}`, rng.IntN(5)))
			}
		},
		func(rng *rand.Rand, token string, _ *[]*keyed) { // reads and intrinsic approvals
			plain(token, "GET", fmt.Sprintf("/v1/orders/ord_%d", 1+rng.IntN(100)), "")
			sa := fmt.Sprintf("/v1/service-accounts/sa_%d", 1+rng.IntN(5))
			if token != "demo-other-org" {
				plain("demo-approver", "POST", sa+"/approve", "")
			}
			plain(token, "GET", sa, "")
		},
		func(rng *rand.Rand, token string, mine *[]*keyed) { // agreements, with preview
			terms := fmt.Sprintf(`{"terms":{"plan":"team","seats":%d}}`, 1+rng.IntN(9))
			plain(token, "POST", "/v1/businesses/soak/agreements/preview", terms)
			*mine = append(*mine, keyedCall(rng, token, "POST", "/v1/businesses/soak/agreements", terms, "agreement.list"))
			plain(token, "GET", "/v1/businesses/soak/agreements", "")
		},
		func(rng *rand.Rand, _ string, mine *[]*keyed) { // a client that gives up
			k := l.newRefund(rng, "soak-gaveup")
			k.body = fmt.Sprintf(`{"amount":1,"simulate":{"delayMs":%d}}`, 100+rng.IntN(200))
			req, _ := http.NewRequest(k.method, s.url+k.path, strings.NewReader(k.body))
			req.Header.Set("Authorization", "Bearer "+k.token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", k.key)
			calls.Add(1)
			client := &http.Client{Timeout: time.Duration(1+rng.IntN(50)) * time.Millisecond}
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close() // answered in time: checked by the retry below
			}
			l.tally.add("gave up", 1)
			*mine = append(*mine, k)
		},
	}

	// Warm up (each operation once, so that pools and caches exist), then
	// take the baseline with no connection left open.
	rng := rand.New(rand.NewPCG(seed, 0))
	var warm []*keyed
	for _, op := range ops {
		op(rng, "demo-agent", &warm)
	}
	goroutines0, rss0 := settle(t, s, 1<<30)

	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	tokens := []string{"demo-agent", "demo-agent-2", "demo-other-org"}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w+1)))
			var mine []*keyed
			for time.Now().Before(stop) {
				ops[rng.IntN(len(ops))](rng, tokens[rng.IntN(len(tokens))], &mine)
			}
		}()
	}
	wg.Wait()

	// Every keyed call, retried until final (records left in flight by
	// clients that gave up finish within their bound).
	for end := time.Now().Add(crashLease + 15*time.Second); l.retryAll(t, s, true) > 0; time.Sleep(250 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("keyed calls still in flight after their lease")
		}
	}
	l.checkLedger(t, s, true)
	goroutines1, rss1 := settle(t, s, goroutines0+5)
	if rss1 > 2*rss0+64<<20 {
		t.Errorf("resident memory grew from %d to %d bytes", rss0, rss1)
	}
	if deliveries.Load() == 0 {
		t.Error("no webhook delivery reached the receiver")
	}
	l.tally.add("requests", int(calls.Load()))
	l.tally.add("webhook deliveries", int(deliveries.Load()))
	t.Logf("figures: %s: %s, goroutines %d before, %d after; RSS %.1f MiB before, %.1f MiB after", t.Name(), &l.tally, goroutines0, goroutines1, float64(rss0)/(1<<20), float64(rss1)/(1<<20))
}

// settle closes the test's idle connections to s and waits until the
// server's goroutine count (go_goroutines) is at most limit; it returns
// that count and the resident memory (process_resident_memory_bytes).
func settle(t *testing.T, s *server, limit int) (goroutines int, rss int64) {
	t.Helper()
	http.DefaultClient.CloseIdleConnections()
	var last map[string]float64
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		last = metricValues(t, s)
		http.DefaultClient.CloseIdleConnections()
		if int(last["go_goroutines"]) <= limit {
			return int(last["go_goroutines"]), int64(last["process_resident_memory_bytes"])
		}
		if time.Now().After(end) {
			t.Fatalf("the server's goroutines stay at %v, want at most %d", last["go_goroutines"], limit)
		}
	}
}

// metricValues reads the unlabelled gauges of s's /metrics.
func metricValues(t *testing.T, s *server) map[string]float64 {
	t.Helper()
	r := s.do(t, "GET", "/metrics", "", "").want(t, 200, "")
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(r.raw)))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := out[want]; !ok {
			t.Fatalf("/metrics has no %s", want)
		}
	}
	return out
}
