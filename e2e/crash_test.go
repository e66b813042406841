package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCrashAndRestart kills the server with SIGKILL while refunds run
// (some finished, some sleeping in simulate.delayMs), restarts it on the
// same store, and checks that no key ever executes twice: every key answers
// its replay, or 409 IDEMPOTENCY_RESULT_INDETERMINATE once its lease passed,
// and the gateway ledger holds at most one execution per request key.
func TestCrashAndRestart(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			url := store(t, dir)
			grace := []string{"--lease-grace", "1s"}
			a := serve(t, url, dir, grace...)

			const n = 16
			type sent struct {
				key, path, body string
				reply           reply
				err             error
			}
			calls := make([]sent, n)
			var wg sync.WaitGroup
			for i := range calls {
				delay := 0
				if i%2 == 1 {
					delay = 3000 // still sleeping when the server dies
				}
				calls[i] = sent{
					key:  fmt.Sprintf("crash-%s-%d", name, i),
					path: fmt.Sprintf("/v1/orders/ord_%d/refund", 40+i),
					body: fmt.Sprintf(`{"amount":100,"simulate":{"delayMs":%d}}`, delay),
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &calls[i]
					c.reply, c.err = a.try("POST", c.path, "demo-agent", c.body, "Idempotency-Key", c.key)
				}()
			}
			// Kill once every fast refund has completed and every slow one
			// is reserved (sleeping in its handler).
			deadline := time.Now().Add(20 * time.Second)
			for ready := 0; ready < n; {
				ready = 0
				for i := range n {
					want := "completed"
					if i%2 == 1 {
						want = "in_flight"
					}
					if r, err := a.try("GET", "/v1/attempts/"+calls[i].key, "demo-agent", ""); err == nil && r.get("data.state") == want {
						ready++
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("the fast refunds did not complete, or the slow ones were not reserved")
				}
			}
			a.kill(t)
			wg.Wait()

			b := serve(t, url, dir, grace...)
			for _, c := range calls {
				var r reply
				for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
					r = b.do(t, "POST", c.path, "demo-agent", c.body, "Idempotency-Key", c.key)
					if code, _ := r.body["code"].(string); code != "IDEMPOTENCY_KEY_IN_FLIGHT" {
						break
					}
					if time.Now().After(end) {
						t.Fatalf("%s still in flight 30 s after the crash", c.key)
					}
				}
				code, _ := r.body["code"].(string)
				switch {
				case r.status == 200 && r.get("meta.idempotency.replayed") == true:
				case r.status == 409 && code == "IDEMPOTENCY_RESULT_INDETERMINATE" && r.get("details.reconcile") == "order.show":
				default:
					t.Fatalf("%s after restart: %d %s (before the crash: %v %s)", c.key, r.status, r.raw, c.err, c.reply.raw)
				}
			}
			perKey := map[string]int{}
			for _, e := range ledgerEffects(t, b, "demo-agent") {
				key, _ := e["requestKey"].(string)
				perKey[key]++
				if ids := e["executionIds"].([]any); len(ids) != 1 {
					t.Fatalf("key %s reached the gateway from %d executions: %v", key, len(ids), e)
				}
			}
			for key, count := range perKey {
				if count > 1 {
					t.Fatalf("key %s has %d ledger effects", key, count)
				}
			}
		})
	}
}

// TestKeyAcrossTwoServers reserves a key through one server and sees it in
// flight, then replayed, through another sharing the PostgreSQL store.
func TestKeyAcrossTwoServers(t *testing.T) {
	dir := t.TempDir()
	url := stores["postgres"](t, dir)
	a, b := serve(t, url, dir), serve(t, url, dir)
	body := `{"amount":100,"simulate":{"delayMs":1500}}`
	done := make(chan reply, 1)
	go func() {
		done <- a.do(t, "POST", "/v1/orders/ord_3/refund", "demo-agent", body, "Idempotency-Key", "two-servers")
	}()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if r := b.do(t, "GET", "/v1/attempts/two-servers", "demo-agent", ""); r.status == 200 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the key never appeared on the second server")
		}
	}
	busy := b.do(t, "POST", "/v1/orders/ord_3/refund", "demo-agent", body, "Idempotency-Key", "two-servers").want(t, 409, "IDEMPOTENCY_KEY_IN_FLIGHT")
	if busy.header.Get("Retry-After") == "" {
		t.Fatal("409 without Retry-After")
	}
	first := (<-done).want(t, 200, "")
	replay := b.do(t, "POST", "/v1/orders/ord_3/refund", "demo-agent", body, "Idempotency-Key", "two-servers").want(t, 200, "")
	if replay.get("meta.idempotency.replayed") != true || replay.get("meta.executionId") != first.get("meta.executionId") {
		t.Fatalf("replay through the other server = %s", replay.raw)
	}
}
