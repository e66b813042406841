package e2e

import (
	"fmt"
	"sync"
	"testing"
)

// TestApprovalRace: after an approval, many concurrent same-key requests
// of the approved intent, spread over the instances, answer as stage 5
// does (the execution, its replay, or 409 in flight), never 403
// APPROVAL_REQUIRED with a new pending approval; the gateway applies the
// refund once (issue 15, item 3). On SQLite with one instance, and on
// PostgreSQL with two sharing the database.
func TestApprovalRace(t *testing.T) {
	const rounds = 5
	for _, c := range []struct {
		store     string
		instances int
	}{{"sqlite", 1}, {"postgres", 2}} {
		t.Run(fmt.Sprintf("%s/%d instances", c.store, c.instances), func(t *testing.T) {
			dir := t.TempDir()
			url := stores[c.store](t, dir)
			var servers []*server
			for range c.instances {
				servers = append(servers, serve(t, url, dir))
			}
			// A few rounds, each with its own key, order and approval: the race
			// window is narrow, and each round is another chance to hit it.
			for round := range rounds {
				key, path := fmt.Sprintf("approved-refund-%d", round), fmt.Sprintf("/v1/orders/ord_%d/refund", 10+round)
				body := `{"amount":6000,"simulate":{"delayMs":200}}`
				first := servers[0].do(t, "POST", path, "demo-agent", body, "Idempotency-Key", key).want(t, 403, "APPROVAL_REQUIRED")
				id, _ := first.get("details.approvalId").(string)
				servers[len(servers)-1].do(t, "POST", "/v1/approvals/"+id+"/approve", "demo-approver", "").want(t, 200, "")

				const n = 50
				replies := make([]reply, n)
				errs := make([]error, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						replies[i], errs[i] = servers[i%len(servers)].try("POST", path, "demo-agent", body, "Idempotency-Key", key)
					}()
				}
				close(start)
				wg.Wait()
				executions := map[any]bool{}
				for i, r := range replies {
					if errs[i] != nil {
						t.Fatalf("request %d: %v", i, errs[i])
					}
					code, _ := r.body["code"].(string)
					switch {
					case r.status == 200:
						executions[r.get("meta.executionId")] = true
					case r.status == 409 && code == "IDEMPOTENCY_KEY_IN_FLIGHT":
					default:
						t.Fatalf("round %d: request %d answered %d %s: %s", round, i, r.status, code, r.raw)
					}
				}
				if len(executions) > 1 {
					t.Fatalf("200 answers name %d executions: %v", len(executions), executions)
				}
				pending := servers[0].do(t, "GET", "/v1/approvals?status=pending", "demo-approver", "").want(t, 200, "")
				if list, _ := pending.get("data").([]any); len(list) != 0 {
					t.Fatalf("new pending approvals: %s", pending.raw)
				}
				// Once finished, the key replays everywhere.
				for _, s := range servers {
					r := s.do(t, "POST", path, "demo-agent", body, "Idempotency-Key", key, "Prefer", "wait=10").want(t, 200, "")
					if r.get("meta.idempotency.replayed") != true {
						t.Fatalf("after the storm: %s", r.raw)
					}
				}
				applied := 0
				for _, e := range ledgerEffects(t, servers[0], "demo-agent") {
					if e["requestKey"] != key {
						continue
					}
					applied++
					if e["applied"] != true || e["calls"] != float64(1) || len(e["executionIds"].([]any)) != 1 {
						t.Fatalf("ledger effect = %v", e)
					}
				}
				if applied != 1 {
					t.Fatalf("%d ledger effects for one key, want 1", applied)
				}
				approval := servers[0].do(t, "GET", "/v1/approvals/"+id, "demo-agent", "").want(t, 200, "")
				if approval.get("data.status") != "consumed" {
					t.Fatalf("approval after the storm = %s", approval.raw)
				}
			}
		})
	}
}
