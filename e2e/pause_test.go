package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// pauseLease is order.refund's lease under --lease-grace 1s: two attempts
// of 5 s, at most 250 ms of backoff, 1 s of grace.
const pauseLease = 11250 * time.Millisecond

// TestPausedExecutorAppliesNothing is the pause scenario of issue 15 on
// two instances sharing PostgreSQL: a refund runs on A, whose first
// attempt outlives its timeout (simulate.timeoutOnce: the runtime retry
// would apply it); A is paused (SIGSTOP) past the lease; B answers the
// key 409 IDEMPOTENCY_RESULT_INDETERMINATE; the agent reconciles with
// order.show on B (nothing refunded) and refunds again with a new key;
// A resumes (SIGCONT). Exactly one refund must land: A's retry must not
// start, and no effect of A's may commit, once B said indeterminate.
func TestPausedExecutorAppliesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := stores["postgres"](t, dir)
	grace := []string{"--lease-grace", "1s"}
	a, b := serve(t, url, dir, grace...), serve(t, url, dir, grace...)
	const path = "/v1/orders/ord_60/refund"
	before := b.do(t, "GET", "/v1/orders/ord_60", "demo-agent", "").want(t, 200, "")
	refunded, _ := before.get("data.refunded").(float64)

	done := make(chan reply, 1)
	failed := make(chan error, 1)
	go func() {
		r, err := a.try("POST", path, "demo-agent", `{"amount":100,"simulate":{"timeoutOnce":true}}`, "Idempotency-Key", "pause-1")
		if err != nil {
			failed <- err
			return
		}
		done <- r
	}()
	reserved := time.Now()
	waitFor(t, 10*time.Second, "the refund to be in flight on B", func() bool {
		return b.do(t, "GET", "/v1/attempts/pause-1", "demo-agent", "").get("data.state") == "in_flight"
	})
	pid := a.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})

	// B: in flight until the lease passes, then indeterminate.
	var answer reply
	waitFor(t, pauseLease+20*time.Second, "B to answer the key indeterminate", func() bool {
		answer = b.do(t, "POST", path, "demo-agent", `{"amount":100,"simulate":{"timeoutOnce":true}}`, "Idempotency-Key", "pause-1")
		code, _ := answer.body["code"].(string)
		return code != "IDEMPOTENCY_KEY_IN_FLIGHT"
	})
	answer.want(t, 409, "IDEMPOTENCY_RESULT_INDETERMINATE")
	if took := time.Since(reserved); took < pauseLease-2*time.Second {
		t.Fatalf("indeterminate %s after the reservation, before the lease of %s passed", took, pauseLease)
	}
	if answer.get("details.reconcile") != "order.show" {
		t.Fatalf("indeterminate without the reconcile read: %s", answer.raw)
	}

	// The documented procedure: reconcile, then a new key only if needed.
	show := b.do(t, "GET", "/v1/orders/ord_60", "demo-agent", "").want(t, 200, "")
	if got, _ := show.get("data.refunded").(float64); got != refunded {
		t.Fatalf("order.show after indeterminate: refunded %v, was %v; the reconcile read says a refund landed", got, refunded)
	}
	b.do(t, "POST", path, "demo-agent", `{"amount":100}`, "Idempotency-Key", "pause-2").want(t, 200, "")

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	var first reply
	select {
	case first = <-done:
	case err := <-failed:
		t.Fatalf("A's request failed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("A's request did not end within 30 s of SIGCONT")
	}
	t.Logf("A answered %d: %s", first.status, first.raw)

	applied := 0
	for _, e := range ledgerEffects(t, b, "demo-agent") {
		if e["orderId"] == "ord_60" && e["applied"] == true {
			applied++
		}
	}
	after := b.do(t, "GET", "/v1/orders/ord_60", "demo-agent", "").want(t, 200, "")
	got, _ := after.get("data.refunded").(float64)
	if applied != 1 || got != refunded+100 {
		t.Fatalf("%d refunds applied at the gateway to ord_60, refunded %v (was %v): want exactly one, the new key's; A's answer: %d %s",
			applied, got, refunded, first.status, first.raw)
	}
	if first.status == 200 || !strings.Contains(string(first.raw), "TIMEOUT") {
		t.Errorf("A answered %d %s; want its TIMEOUT (the lease passed before attempt 2)", first.status, first.raw)
	}
	if a := b.do(t, "GET", "/v1/attempts/pause-1", "demo-agent", ""); a.get("data.state") != "indeterminate" {
		t.Errorf("record after A resumed: %s, want indeterminate", a.raw)
	}
}
