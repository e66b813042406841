package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestTransactionalCrashLeavesNothing kills the server with SIGKILL while
// transactional business creates run (some committed, some sleeping in
// simulate.delayMs inside their transaction), restarts it on the same
// store, and checks SPEC §6.7: a create that committed replays; one that
// had not committed left no record and no business, so the same request
// with the same key simply runs afresh (never indeterminate); each slug
// exists exactly once.
func TestTransactionalCrashLeavesNothing(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			url := store(t, dir)
			a := serve(t, url, dir)
			const n = 8
			type sent struct{ key, slug, body string }
			calls := make([]sent, n)
			for i := range calls {
				delay := 0
				if i%2 == 1 {
					delay = 2000 // uncommitted when the server dies
				}
				slug := fmt.Sprintf("crash-tx-%s-%d", name, i)
				calls[i] = sent{key: "tx-" + slug, slug: slug,
					body: fmt.Sprintf(`{"slug":%q,"name":"Crash %d","simulate":{"delayMs":%d}}`, slug, i, delay)}
			}
			// The fast ones commit before the slow ones start (on SQLite
			// those hold the single writer, one after another).
			for i := 0; i < n; i += 2 {
				a.do(t, "POST", "/v1/businesses", "demo-agent", calls[i].body, "Idempotency-Key", calls[i].key).want(t, 201, "")
			}
			var wg sync.WaitGroup
			for i := 1; i < n; i += 2 {
				wg.Go(func() {
					_, _ = a.try("POST", "/v1/businesses", "demo-agent", calls[i].body, "Idempotency-Key", calls[i].key)
				})
			}
			time.Sleep(300 * time.Millisecond) // let every slow create start before the probes
			// Kill once every slow create holds its key: a same-key request
			// answers 409 in flight at once, and there is no record.
			deadline := time.Now().Add(20 * time.Second)
			for ready := 0; ready < n/2; {
				ready = 0
				for i, c := range calls {
					if i%2 == 0 {
						continue
					}
					r, err := a.try("POST", "/v1/businesses", "demo-agent", c.body, "Idempotency-Key", c.key)
					if err == nil && r.status == 409 && r.get("code") == "IDEMPOTENCY_KEY_IN_FLIGHT" {
						if g, err := a.try("GET", "/v1/attempts/"+c.key, "demo-agent", ""); err == nil && g.status == 404 {
							ready++
						}
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("the slow creates were not running")
				}
			}
			a.kill(t)
			wg.Wait()

			b := serve(t, url, dir)
			for i, c := range calls {
				// The uncommitted ones must not need a reconcile: no record,
				// no business.
				if i%2 == 1 {
					b.do(t, "GET", "/v1/attempts/"+c.key, "demo-agent", "").want(t, 404, "NOT_FOUND")
					b.do(t, "GET", "/v1/businesses/"+c.slug, "demo-agent", "").want(t, 404, "NOT_FOUND")
				}
				var r reply
				for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					r = b.do(t, "POST", "/v1/businesses", "demo-agent", c.body, "Idempotency-Key", c.key)
					if r.get("code") != "IDEMPOTENCY_KEY_IN_FLIGHT" || time.Now().After(end) {
						break
					}
				}
				replayed := r.get("meta.idempotency.replayed") == true
				switch {
				case i%2 == 0 && r.status == 201 && replayed:
				case i%2 == 1 && r.status == 201 && !replayed:
					// Nothing had committed: the same key ran afresh.
				default:
					t.Fatalf("%s after restart: %d %s", c.key, r.status, r.raw)
				}
				b.do(t, "GET", "/v1/businesses/"+c.slug, "demo-agent", "").want(t, 200, "")
			}
		})
	}
}

// TestTransactionalStorm sends 200 same-key transactional creates at once,
// without and with Prefer: wait, on both stores: exactly one executes;
// every other answer is 409 in flight or, after the commit, its replay
// (with Prefer: wait, every answer is 201).
func TestTransactionalStorm(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := serve(t, store(t, dir), dir)
			for _, wait := range []bool{false, true} {
				slug := fmt.Sprintf("storm-%s-%v", name, wait)
				body := fmt.Sprintf(`{"slug":%q,"name":"Storm","simulate":{"delayMs":300}}`, slug)
				headers := []string{"Idempotency-Key", "storm-" + slug}
				if wait {
					headers = append(headers, "Prefer", "wait=10")
				}
				const n = 200
				replies := make([]reply, n)
				errs := make([]error, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						<-start
						replies[i], errs[i] = s.try("POST", "/v1/businesses", "demo-agent", body, headers...)
					})
				}
				close(start)
				wg.Wait()
				executed, replays, inFlight := 0, 0, 0
				ids := map[any]bool{}
				for i, r := range replies {
					if errs[i] != nil {
						t.Fatalf("request %d: %v", i, errs[i])
					}
					switch {
					case r.status == 201 && r.get("meta.idempotency.replayed") == false:
						executed++
						ids[r.get("meta.executionId")] = true
					case r.status == 201:
						replays++
						ids[r.get("meta.executionId")] = true
					case r.status == 409 && r.get("code") == "IDEMPOTENCY_KEY_IN_FLIGHT" && !wait:
						inFlight++
					case r.status == 429 || r.status == 503:
						// admission control: nothing stored, the key not consumed
					default:
						t.Fatalf("wait=%v: unexpected answer %d %s", wait, r.status, r.raw)
					}
				}
				if executed != 1 || len(ids) != 1 {
					t.Fatalf("wait=%v: %d executions, %d execution ids (replays %d, in flight %d); want exactly one", wait, executed, len(ids), replays, inFlight)
				}
				t.Logf("wait=%v: 1 execution, %d replays, %d in flight", wait, replays, inFlight)
				b := s.do(t, "GET", "/v1/businesses/"+slug, "demo-agent", "").want(t, 200, "")
				if b.get("data.slug") != slug {
					t.Fatalf("business = %s", b.raw)
				}
			}
		})
	}
}
