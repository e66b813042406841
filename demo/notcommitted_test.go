package demo

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/idem-run/idem"
)

// A refund whose own transaction fails for the store (here its fence
// check, as a full disk or a lost connection fails a statement) refunded
// nothing: the keyed call answers a retryable 503 STORE_UNAVAILABLE, the
// key is free, and the same key then refunds once (issue 36 item 4).
func TestRefundWhoseTransactionFailedFreesTheKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		check := checkStoreFence
		t.Cleanup(func() { checkStoreFence = check })
		checkStoreFence = func(context.Context, *Tx, idem.Fence) error {
			return errors.New("disk I/O error (simulated)")
		}
		r := e.call(t, refund("", "ord_4", `{"amount": 10}`, "nc-1")).must(t, 503, idem.CodeStoreUnavailable)
		var p struct {
			Retryable bool           `json:"retryable"`
			Details   map[string]any `json:"details"`
		}
		if err := json.Unmarshal(r.Raw, &p); err != nil || !p.Retryable || p.Details["reconcile"] != nil {
			t.Fatalf("a refund whose transaction failed: %s; want a retryable 503 without reconcile (nothing ran)", r.Raw)
		}
		agent := Tokens()["demo-agent"]
		if _, err := e.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "nc-1"}); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("the key after a refund that did not commit: %v, want it free (NOT_FOUND)", err)
		}

		checkStoreFence = check
		again := e.call(t, refund("", "ord_4", `{"amount": 10}`, "nc-1")).must(t, 200, "")
		if again.Meta.Idempotency != nil && again.Meta.Idempotency.Replayed {
			t.Fatalf("the same key after the failure was replayed: %s", again.Raw)
		}
		effects, _, err := e.app.gatewayLedger(t.Context(), agent.Org, ledgerLimitMax, "")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, eff := range effects {
			if eff.OrderID == "ord_4" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d gateway effects on ord_4, want 1", n)
		}
	})
}

// notCommitted marks NotDispatched only a store failure of a transaction
// certain not to have committed.
func TestNotCommitted(t *testing.T) {
	live, done := context.Background(), func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}()
	atCommit := idem.Unavailable("demo transaction", errors.New("database or disk is full"))
	beforeCommit := idem.Unavailable("demo transaction", errBeforeCommit{errors.New("conn closed")})
	business := idem.Errorf(CodeAlreadyRefunded, "too much")
	for _, tc := range []struct {
		name    string
		dialect string
		ctx     context.Context
		err     error
		want    bool
	}{
		{"SQLite, failed COMMIT", "sqlite", live, atCommit, true},
		{"SQLite, failed statement", "sqlite", live, beforeCommit, true},
		{"PostgreSQL, failed before COMMIT", "postgres", live, beforeCommit, true},
		{"PostgreSQL, failed COMMIT (it may have committed)", "postgres", live, atCommit, false},
		{"a business error", "sqlite", live, business, false},
		{"an INTERNAL", "sqlite", live, idem.Errorf(idem.CodeInternal, "refused"), false},
		{"the caller's context ended", "sqlite", done, atCommit, false},
		{"no error", "sqlite", live, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := (&DB{dialect: tc.dialect}).notCommitted(tc.ctx, tc.err)
			if got := idem.IsNotDispatched(err); got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("notCommitted(%v) = %v (not dispatched %v), want not dispatched %v, wrapping the error", tc.err, err, got, tc.want)
			}
		})
	}
}
