package storetest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

func ctx(t *testing.T) context.Context { return t.Context() }

func init() {
	register("ReserveThenComplete", testReserveThenComplete)
	register("ReserveFindsExistingRecord", testReserveFindsExisting)
	register("ServerErrorIsIndeterminate", testServerErrorIsIndeterminate)
	register("StaleFencingTokenCannotComplete", testStaleFencingToken)
	register("PassedLeaseIsIndeterminateAndNeverReReserved", testPassedLease)
	register("SecretExpiresToTombstone", testSecretExpiry)
	register("RetentionForgetsRecord", testRetention)
	register("KeysAreScoped", testKeysAreScoped)
	register("GetAttemptUnknown", testGetAttemptUnknown)
	register("CancelledContext", testCancelledContext)
	register("UnreachableDatabaseIsUnavailable", testUnreachable)
}

func testReserveThenComplete(t *testing.T, e *env) {
	s := e.s(t)
	p := reserveParams(scopeA, "key-1", fpOne)
	res := mustReserve(t, s, p)
	a := res.Attempt
	now := e.clock.Now()
	if a.State != idem.AttemptInFlight || a.Key != "key-1" || a.Scope != scopeA || a.Fingerprint != fpOne ||
		a.Operation != "order.refund" || a.ExecutionID != p.ExecutionID || a.Status != 0 {
		t.Fatalf("reserved record = %+v", a)
	}
	if a.FencingToken == 0 {
		t.Error("reserved record has no fencing token")
	}
	if !a.CreatedAt.Equal(now) || !a.LeaseExpiresAt.Equal(now.Add(lease)) || !a.ExpiresAt.Equal(now.Add(keepFor)) {
		t.Errorf("times: created %v lease %v expires %v; now %v", a.CreatedAt, a.LeaseExpiresAt, a.ExpiresAt, now)
	}
	if res.Execution.ID != p.ExecutionID || res.Execution.Outcome != idem.OutcomeRunning || res.Execution.Attempts != 1 {
		t.Errorf("execution = %+v", res.Execution)
	}

	got, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != idem.AttemptInFlight || got.FencingToken != a.FencingToken {
		t.Fatalf("GetAttempt while in flight = %+v", got)
	}

	e.clock.Advance(2 * time.Second)
	cp := completeParams(a, http.StatusCreated, `{"data":{"id":"r1"}}`)
	cp.Headers.Set("Location", "/v1/refunds/r1")
	cp.Headers.Set("Set-Cookie", "session=secret")
	cp.Headers.Set("X-Request-Id", "abc")
	cp.Finish.Attempts = 3
	done, err := s.Complete(ctx(t), cp)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	for _, got := range []idem.Attempt{done, mustGet(t, s, scopeA, "key-1")} {
		if got.State != idem.AttemptCompleted || got.Status != http.StatusCreated || string(got.Body) != `{"data":{"id":"r1"}}` || got.Attempts != 3 {
			t.Fatalf("completed record = %+v", got)
		}
		if !got.CompletedAt.Equal(e.clock.Now()) {
			t.Errorf("completedAt = %v, want %v", got.CompletedAt, e.clock.Now())
		}
		if got.Headers.Get("Location") != "/v1/refunds/r1" || got.Headers.Get("Content-Type") != "application/json" {
			t.Errorf("allowed headers not kept: %v", got.Headers)
		}
		if got.Headers.Get("Set-Cookie") != "" || got.Headers.Get("X-Request-Id") != "" {
			t.Errorf("headers outside the allow-list kept: %v", got.Headers)
		}
	}

	exe, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: a.ExecutionID})
	if err != nil {
		t.Fatal(err)
	}
	if exe.Outcome != idem.OutcomeSucceeded || exe.Attempts != 3 || exe.FinishedAt == nil {
		t.Errorf("finished execution = %+v", exe)
	}
	if types := eventTypes(exe); len(types) != 2 || types[0] != idem.EventStarted || types[1] != idem.EventSucceeded {
		t.Errorf("events = %v, want [started succeeded]", types)
	}
}

func testReserveFindsExisting(t *testing.T, e *env) {
	s := e.s(t)
	first := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	for _, fp := range []string{fpOne, fpTwo} {
		again := reserveParams(scopeA, "key-1", fp)
		res, err := s.Reserve(ctx(t), again)
		if err != nil {
			t.Fatal(err)
		}
		if res.Reserved {
			t.Fatalf("second Reserve with fingerprint %s reserved again", fp[:4])
		}
		if res.Attempt.FencingToken != first.Attempt.FencingToken || res.Attempt.ExecutionID != first.Attempt.ExecutionID ||
			res.Attempt.Fingerprint != fpOne || res.Attempt.State != idem.AttemptInFlight {
			t.Fatalf("existing record = %+v, want the first reservation", res.Attempt)
		}
		if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: again.ExecutionID}); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("a losing Reserve created execution %s (err %v)", again.ExecutionID, err)
		}
	}
	if _, err := s.Complete(ctx(t), completeParams(first.Attempt, 200, `{}`)); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(ctx(t), reserveParams(scopeA, "key-1", fpOne))
	if err != nil || res.Reserved || res.Attempt.State != idem.AttemptCompleted || res.Attempt.Status != 200 {
		t.Fatalf("Reserve on a completed record = %+v, %v", res, err)
	}
}

func testServerErrorIsIndeterminate(t *testing.T, e *env) {
	s := e.s(t)
	for _, status := range []int{499, 500, 504} {
		key := newID("key-")
		res := mustReserve(t, s, reserveParams(scopeA, key, fpOne))
		got, err := s.Complete(ctx(t), completeParams(res.Attempt, status, `{"code":"EXECUTION_FAILED"}`))
		if err != nil {
			t.Fatal(err)
		}
		if got.State != idem.AttemptIndeterminate || got.Status != status {
			t.Errorf("after a %d: %+v, want indeterminate with the status kept", status, got)
		}
		again, err := s.Reserve(ctx(t), reserveParams(scopeA, key, fpOne))
		if err != nil || again.Reserved || again.Attempt.State != idem.AttemptIndeterminate {
			t.Errorf("indeterminate record re-reserved or changed: %+v, %v", again, err)
		}
	}
	for _, status := range []int{200, 302, 404, 409, 422} {
		res := mustReserve(t, s, reserveParams(scopeA, newID("key-"), fpOne))
		got, err := s.Complete(ctx(t), completeParams(res.Attempt, status, `{}`))
		if err != nil || got.State != idem.AttemptCompleted || got.Status != status {
			t.Errorf("after a %d: %+v, %v; want completed", status, got, err)
		}
	}
}

func testStaleFencingToken(t *testing.T, e *env) {
	s := e.s(t)
	res := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	stale := completeParams(res.Attempt, 200, `{"stale":true}`)
	stale.FencingToken = res.Attempt.FencingToken + 1
	if _, err := s.Complete(ctx(t), stale); !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("Complete with a wrong token: err = %v, want ErrFenced", err)
	}
	if got := mustGet(t, s, scopeA, "key-1"); got.State != idem.AttemptInFlight {
		t.Fatalf("a fenced Complete changed the record: %+v", got)
	}
	if _, err := s.Complete(ctx(t), completeParams(res.Attempt, 200, `{"first":true}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(ctx(t), completeParams(res.Attempt, 201, `{"second":true}`)); !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("second Complete: err = %v, want ErrFenced (finalize once)", err)
	}
	if got := mustGet(t, s, scopeA, "key-1"); got.Status != 200 || string(got.Body) != `{"first":true}` {
		t.Fatalf("record after a second Complete = %+v", got)
	}
}

func testPassedLease(t *testing.T, e *env) {
	s := e.s(t)
	res := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	e.clock.Advance(lease - time.Microsecond)
	if got := mustGet(t, s, scopeA, "key-1"); got.State != idem.AttemptInFlight {
		t.Fatalf("just before the lease passes: %s, want in_flight", got.State)
	}
	e.clock.Advance(time.Microsecond)
	got := mustGet(t, s, scopeA, "key-1")
	if got.State != idem.AttemptIndeterminate || got.Status != 0 {
		t.Fatalf("lease passed: %+v, want indeterminate with no status", got)
	}
	again, err := s.Reserve(ctx(t), reserveParams(scopeA, "key-1", fpOne))
	if err != nil || again.Reserved || again.Attempt.State != idem.AttemptIndeterminate || again.Attempt.FencingToken != res.Attempt.FencingToken {
		t.Fatalf("Reserve after the lease passed = %+v, %v; want the indeterminate record, not a new executor", again, err)
	}
	if _, err := s.Complete(ctx(t), completeParams(res.Attempt, 200, `{}`)); !errors.Is(err, idem.ErrFenced) {
		t.Fatalf("Complete after the lease passed: err = %v, want ErrFenced", err)
	}
	sw, err := s.Sweep(ctx(t), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sw.LeasesExpired != 0 {
		t.Errorf("Sweep marked %d leases, want 0: reading the record made its state durable", sw.LeasesExpired)
	}
	if got := mustGet(t, s, scopeA, "key-1"); got.State != idem.AttemptIndeterminate || got.Status != 0 {
		t.Fatalf("after Sweep: %+v", got)
	}
}

func testSecretExpiry(t *testing.T, e *env) {
	s := e.s(t)
	res := mustReserve(t, s, reserveParams(scopeA, "mint-1", fpOne))
	cp := completeParams(res.Attempt, 201, "\x00ciphertext\xff")
	cp.SealedKeyID = "k1"
	cp.SecretWindow = 15 * time.Minute
	done, err := s.Complete(ctx(t), cp)
	if err != nil {
		t.Fatal(err)
	}
	wantExpiry := e.clock.Now().Add(15 * time.Minute)
	if done.State != idem.AttemptCompleted || done.SealedKeyID != "k1" || !done.SecretExpiresAt.Equal(wantExpiry) || string(done.Body) != "\x00ciphertext\xff" {
		t.Fatalf("sealed completion = %+v", done)
	}
	e.clock.Advance(15*time.Minute - time.Microsecond)
	if got := mustGet(t, s, scopeA, "mint-1"); got.State != idem.AttemptCompleted || string(got.Body) != "\x00ciphertext\xff" {
		t.Fatalf("inside the window: %+v", got)
	}
	e.clock.Advance(time.Microsecond)
	if got := mustGet(t, s, scopeA, "mint-1"); got.State != idem.AttemptExpired || got.Body != nil || got.Status != 201 {
		t.Fatalf("window passed: %+v, want an expired tombstone without body", got)
	}
	sw, err := s.Sweep(ctx(t), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sw.SecretsDestroyed != 1 {
		t.Errorf("Sweep destroyed %d secrets, want 1", sw.SecretsDestroyed)
	}
	e.clock.Advance(-time.Hour) // even a reader whose clock lags sees no ciphertext once destroyed
	if got := mustGet(t, s, scopeA, "mint-1"); got.State != idem.AttemptExpired || got.Body != nil {
		t.Fatalf("after Sweep: %+v, want a tombstone", got)
	}
	e.clock.Advance(time.Hour)
	again, err := s.Reserve(ctx(t), reserveParams(scopeA, "mint-1", fpOne))
	if err != nil || again.Reserved || again.Attempt.State != idem.AttemptExpired {
		t.Fatalf("Reserve on a tombstone = %+v, %v; the mutation must never re-run", again, err)
	}
}

func testRetention(t *testing.T, e *env) {
	s := e.s(t)
	first := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	if _, err := s.Complete(ctx(t), completeParams(first.Attempt, 200, `{}`)); err != nil {
		t.Fatal(err)
	}
	other := mustReserve(t, s, reserveParams(scopeA, "key-2", fpOne))
	e.clock.Advance(keepFor)
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-1"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("GetAttempt past retention: err = %v, want NOT_FOUND", err)
	}
	// A forgotten record that is not swept yet gives way to a new attempt.
	again := mustReserve(t, s, reserveParams(scopeA, "key-1", fpTwo))
	if again.Attempt.FencingToken == first.Attempt.FencingToken || again.Attempt.Fingerprint != fpTwo {
		t.Fatalf("new attempt after retention = %+v", again.Attempt)
	}
	sw, err := s.Sweep(ctx(t), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sw.Forgotten != 1 {
		t.Errorf("Sweep forgot %d records, want 1 (key-2)", sw.Forgotten)
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: other.Attempt.Key}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("swept record still readable: %v", err)
	}
	if got := mustGet(t, s, scopeA, "key-1"); got.Fingerprint != fpTwo || got.State != idem.AttemptInFlight {
		t.Errorf("Sweep touched the new attempt: %+v", got)
	}
	// Tokens are never reused, not even those of records swept away.
	next := mustReserve(t, s, reserveParams(scopeA, "key-3", fpOne))
	for _, old := range []idem.ReserveResult{first, other, again} {
		if next.Attempt.FencingToken == old.Attempt.FencingToken {
			t.Errorf("fencing token %d reused", old.Attempt.FencingToken)
		}
	}
}

func testKeysAreScoped(t *testing.T, e *env) {
	s := e.s(t)
	tokens := map[int64]bool{}
	for _, scope := range []idem.Scope{scopeA, scopeB, scopeC} {
		res := mustReserve(t, s, reserveParams(scope, "shared-key", fpOne))
		tokens[res.Attempt.FencingToken] = true
	}
	if len(tokens) != 3 {
		t.Errorf("three scopes got %d distinct fencing tokens", len(tokens))
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: idem.Scope{Org: "acme", Principal: "nobody"}, Key: "shared-key"}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("another principal can read the record: %v", err)
	}
}

func testGetAttemptUnknown(t *testing.T, e *env) {
	_, err := e.s(t).GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "never-used"})
	if !errors.Is(err, idem.ErrNotFound) || idem.ErrorCode(err) != idem.CodeNotFound {
		t.Fatalf("err = %v, want NOT_FOUND", err)
	}
}

func testCancelledContext(t *testing.T, e *env) {
	s := e.s(t)
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	if _, err := s.Reserve(c, reserveParams(scopeA, "key-1", fpOne)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with a cancelled context: err = %v, want context.Canceled", err)
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-1"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a cancelled Reserve left a record: %v", err)
	}
}

func testUnreachable(t *testing.T, e *env) {
	s := e.s(t)
	mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatalf("Ping on a reachable database: %v", err)
	}
	e.Break(t)
	c, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	calls := map[string]func() error{
		"Reserve": func() error { _, err := s.Reserve(c, reserveParams(scopeA, "key-2", fpOne)); return err },
		"GetAttempt": func() error {
			_, err := s.GetAttempt(c, idem.GetAttemptParams{Scope: scopeA, Key: "key-1"})
			return err
		},
		"RequestApproval": func() error {
			_, err := s.RequestApproval(c, approvalParams("acme", "agent-1", fpOne))
			return err
		},
		"Sweep": func() error { _, err := s.Sweep(c, idem.SweepParams{}); return err },
		"Ping":  func() error { return s.Ping(c) },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Errorf("%s on an unreachable database: err = %v, want STORE_UNAVAILABLE", name, err)
		}
	}
}

func mustGet(t *testing.T, s idem.Store, scope idem.Scope, key string) idem.Attempt {
	t.Helper()
	a, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scope, Key: key})
	if err != nil {
		t.Fatalf("GetAttempt(%s): %v", key, err)
	}
	return a
}

func eventTypes(x idem.Execution) []string {
	var out []string
	for _, ev := range x.Events {
		out = append(out, ev.Type)
	}
	return out
}
