package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSweeperAcrossRestart: what time alone changes keeps happening after
// a crash. A refund in flight when its server is killed reads in flight,
// then indeterminate once its lease passes, through the restarted server,
// and that server's sweeper records it; an approval pending at the crash
// expires after the restart (deciding it answers APPROVAL_EXPIRED, the
// same intent opens a new approval); a record reserved with a short
// retention stays within it and is forgotten past it by the next server's
// sweeper, and its key starts a new attempt, while a record within its
// retention stays. The crash and the retention run at once on stores of
// their own, each in subtests that finish as they go: make test prints a
// line per subtest, so none of its waits (the retention is 32 s) is a
// silence of more than about 20 s.
func TestSweeperAcrossRestart(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T){}
	for name, store := range stores {
		cases[name] = func(t *testing.T) {
			flags := []string{"--lease-grace", "200ms", "--sweep-interval", "300ms", "--approval-expiry", "3s"}
			together(t, map[string]func(t *testing.T){
				"crash":     func(t *testing.T) { sweepAfterCrash(t, store, flags) },
				"retention": func(t *testing.T) { sweepPastRetention(t, store, flags) },
			})
		}
	}
	together(t, cases)
}

// sweepAfterCrash: leases and approvals of a killed server, through the
// restarted one.
func sweepAfterCrash(t *testing.T, store func(t *testing.T, dir string) string, flags []string) {
	dir := t.TempDir()
	url := store(t, dir)
	a := serve(t, url, dir, flags...)

	done := a.do(t, "POST", "/v1/orders/ord_19/refund", "demo-agent", `{"amount":5}`, "Idempotency-Key", "sweep-done").want(t, 200, "")
	ask := a.do(t, "POST", "/v1/orders/ord_21/refund", "demo-agent", `{"amount":6000}`, "Idempotency-Key", "sweep-approval").want(t, 403, "APPROVAL_REQUIRED")
	approval, _ := ask.get("details.approvalId").(string)
	slow := `{"amount":5,"simulate":{"delayMs":4000}}`
	reserved := time.Now()
	go a.try("POST", "/v1/orders/ord_20/refund", "demo-agent", slow, "Idempotency-Key", "sweep-inflight")
	// Read by nobody after the crash: the sweeper writes its state down.
	go a.try("POST", "/v1/orders/ord_23/refund", "demo-agent", slow, "Idempotency-Key", "sweep-unread")
	waitFor(t, 10*time.Second, "the slow refunds to be in flight", func() bool {
		return a.do(t, "GET", "/v1/attempts/sweep-inflight", "demo-agent", "").get("data.state") == "in_flight" &&
			a.do(t, "GET", "/v1/attempts/sweep-unread", "demo-agent", "").get("data.state") == "in_flight"
	})
	a.kill(t)

	b := serve(t, url, dir, flags...)
	ok := t.Run("lease", func(t *testing.T) {
		if state := b.do(t, "GET", "/v1/attempts/sweep-inflight", "demo-agent", "").get("data.state"); time.Since(reserved) < crashLease-time.Second && state != "in_flight" {
			t.Fatalf("the dead server's record reads %v before its lease passed", state)
		}
		waitFor(t, crashLease+15*time.Second, "the dead server's record to become indeterminate", func() bool {
			return b.do(t, "GET", "/v1/attempts/sweep-inflight", "demo-agent", "").get("data.state") == "indeterminate"
		})
		b.do(t, "POST", "/v1/orders/ord_20/refund", "demo-agent", slow, "Idempotency-Key", "sweep-inflight").want(t, 409, "IDEMPOTENCY_RESULT_INDETERMINATE")
		for _, e := range ledgerEffects(t, b, "demo-agent") {
			if e["requestKey"] == "sweep-inflight" {
				t.Fatalf("the refund killed in its delay reached the gateway: %v", e)
			}
		}
		// Read past its lease, a record is written down indeterminate
		// before it is answered; one nobody reads, by the sweeper.
		waitFor(t, 15*time.Second, "the restarted server's sweeper to expire the unread lease", func() bool { return swept(b, "leasesExpired") > 0 })
		b.do(t, "GET", "/v1/attempts/sweep-unread", "demo-agent", "").want(t, 200, "")
	})
	if !ok {
		return
	}
	t.Run("approval", func(t *testing.T) {
		waitFor(t, 20*time.Second, "the approval to expire", func() bool {
			return b.do(t, "GET", "/v1/approvals/"+approval, "demo-agent", "").get("data.status") == "expired"
		})
		b.do(t, "POST", "/v1/approvals/"+approval+"/approve", "demo-approver", "").want(t, 409, "APPROVAL_EXPIRED")
		again := b.do(t, "POST", "/v1/orders/ord_21/refund", "demo-agent", `{"amount":6000}`, "Idempotency-Key", "sweep-approval-2").want(t, 403, "APPROVAL_REQUIRED")
		if id := again.get("details.approvalId"); id == approval || id == nil {
			t.Fatalf("the same intent after expiry got approval %v, the expired one is %s", id, approval)
		}
		waitFor(t, 15*time.Second, "the sweeper to expire the approval", func() bool { return swept(b, "approvalsExpired") > 0 })
		if r := b.do(t, "POST", "/v1/orders/ord_19/refund", "demo-agent", `{"amount":5}`, "Idempotency-Key", "sweep-done").want(t, 200, ""); r.get("meta.executionId") != done.get("meta.executionId") {
			t.Fatalf("replay after the restart: %s", r.raw)
		}
		if err := b.stop(t); err != nil {
			t.Fatalf("SIGTERM: %v", err)
		}
	})
}

// sweepPastRetention: a record carries the retention it was reserved with
// (the shortest idem serve accepts: the longest lease, 30.2 s, plus the
// 1 s margin) to the next server, whose sweeper keeps it within it and
// forgets it past it, keeping a record of the default retention.
func sweepPastRetention(t *testing.T, store func(t *testing.T, dir string) string, flags []string) {
	const retention = 32 * time.Second
	dir := t.TempDir()
	url := store(t, dir)
	c := serve(t, url, dir, append(flags, "--retention", retention.String())...)
	reserved := time.Now()
	short := c.do(t, "POST", "/v1/orders/ord_22/refund", "demo-agent", `{"amount":5}`, "Idempotency-Key", "sweep-short").want(t, 200, "")
	c.kill(t)
	d := serve(t, url, dir, flags...)
	d.do(t, "POST", "/v1/orders/ord_19/refund", "demo-agent", `{"amount":5}`, "Idempotency-Key", "sweep-long").want(t, 200, "")
	ok := t.Run("kept within it", func(t *testing.T) {
		// Half the retention, the sweeper having run every 150-450 ms.
		time.Sleep(time.Until(reserved.Add(retention / 2)))
		if r := d.do(t, "POST", "/v1/orders/ord_22/refund", "demo-agent", `{"amount":5}`, "Idempotency-Key", "sweep-short").want(t, 200, ""); r.get("meta.executionId") != short.get("meta.executionId") {
			t.Fatalf("within its retention, the record did not replay: %s", r.raw)
		}
		if n := swept(d, "forgotten"); n != 0 {
			t.Fatalf("the sweeper forgot %d records within their retention", n)
		}
	})
	if !ok {
		return
	}
	t.Run("forgotten past it", func(t *testing.T) {
		waitFor(t, 35*time.Second, "the record past its retention to be forgotten", func() bool {
			return d.do(t, "GET", "/v1/attempts/sweep-short", "demo-agent", "").status == 404
		})
		// It reads absent once past its retention, and the sweeper forgets
		// it.
		waitFor(t, 15*time.Second, "the sweeper to forget the record", func() bool { return swept(d, "forgotten") > 0 })
		fresh := d.do(t, "POST", "/v1/orders/ord_22/refund", "demo-agent", `{"amount":5}`, "Idempotency-Key", "sweep-short").want(t, 200, "")
		if fresh.get("meta.idempotency.replayed") == true || fresh.get("meta.executionId") == short.get("meta.executionId") {
			t.Fatalf("a forgotten key replayed: %s", fresh.raw)
		}
		d.do(t, "GET", "/v1/attempts/sweep-long", "demo-agent", "").want(t, 200, "")
	})
}

// waitFor polls cond every 100 ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited %s for %s", d, what)
		}
	}
}

// swept sums a count of the "swept" log lines of s.
func swept(s *server, field string) int {
	n := 0
	for _, line := range strings.Split(s.logs(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "swept" {
			f, _ := m[field].(float64)
			n += int(f)
		}
	}
	return n
}
