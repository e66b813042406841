package demo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// A refund commits only while its execution holds its lease: called with
// a fence that holds it applies; with a fence that no longer holds (a
// completed reservation, another token) it answers that the lease was
// lost and neither the refund nor the gateway's effect lands.
func TestRefundIsFenced(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		agent := Tokens()["demo-agent"]
		res, err := e.store.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_fence1", Scope: agent.Scope(), Operation: "order.refund", Fingerprint: "fp"},
			Key:         "fence-1", Lease: time.Minute, Retention: time.Hour,
		})
		if err != nil || !res.Reserved {
			t.Fatalf("Reserve = %+v, %v", res, err)
		}
		call := &idem.Call{Operation: "order.refund", ExecutionID: "exe_fence1", Attempt: 1, Principal: agent,
			IdempotencyKey: "ik_fence1", RequestKey: "fence-1", FencingToken: res.Attempt.FencingToken}

		stale := *call
		stale.FencingToken++
		stale.IdempotencyKey = "ik_fence_stale"
		if _, err := e.app.refundOrder(t.Context(), &stale, refundInput{ID: "ord_2", Amount: 100}); !errors.Is(err, idem.ErrFenced) || idem.ErrorCode(err) != idem.CodeTimeout {
			t.Fatalf("refund under a stale fence: err = %v, want a TIMEOUT wrapping ErrFenced", err)
		}
		if _, err := e.app.refundOrder(t.Context(), call, refundInput{ID: "ord_2", Amount: 100}); err != nil {
			t.Fatalf("refund under its fence: %v", err)
		}
		if _, err := e.store.Complete(t.Context(), idem.CompleteParams{Scope: agent.Scope(), Key: "fence-1", FencingToken: call.FencingToken, Status: 200,
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}); err != nil {
			t.Fatal(err)
		}
		late := *call
		late.IdempotencyKey = "ik_fence_late"
		if _, err := e.app.refundOrder(t.Context(), &late, refundInput{ID: "ord_2", Amount: 100}); !errors.Is(err, idem.ErrFenced) {
			t.Fatalf("refund after the record completed: err = %v, want ErrFenced", err)
		}
		// The gateway checks the fence it receives where its effect commits,
		// whatever its caller checked.
		err = e.app.db.InTx(t.Context(), func(tx *Tx) error {
			_, _, err := gatewayRefund(t.Context(), tx, e.app.now(), gatewayRefundParams{Org: agent.Org, Key: "ik_fence_gw", Fence: stale.Fence(),
				Principal: agent.ID, RequestKey: "fence-1", ExecutionID: "exe_fence1", OrderID: "ord_2", Amount: 100})
			return err
		})
		if !errors.Is(err, idem.ErrFenced) {
			t.Fatalf("gateway call under a stale fence: err = %v, want ErrFenced", err)
		}
		effects, _, err := e.app.gatewayLedger(t.Context(), agent.Org, ledgerLimitMax, "")
		if err != nil {
			t.Fatal(err)
		}
		var applied []string
		for _, eff := range effects {
			if eff.OrderID == "ord_2" {
				applied = append(applied, eff.Key)
			}
		}
		if len(applied) != 1 || applied[0] != "ik_fence1" {
			t.Fatalf("gateway effects on ord_2 = %v, want only ik_fence1's", applied)
		}
	})
}

// A refund checks its fence once: the check holds the record until the
// transaction ends, so the gateway's check of the same fence in it is not
// sent again (issue 36); a check of another fence in it still is.
func TestRefundChecksItsFenceOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		var checks int
		check := checkStoreFence
		checkStoreFence = func(ctx context.Context, tx *Tx, f idem.Fence) error {
			checks++
			return check(ctx, tx, f)
		}
		t.Cleanup(func() { checkStoreFence = check })

		e.call(t, refund("", "ord_3", `{"amount": 10}`, "once-1")).must(t, 200, "")
		if checks != 1 {
			t.Errorf("a keyed refund checked its fence %d times, want 1", checks)
		}

		agent := Tokens()["demo-agent"]
		res, err := e.store.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_once2", Scope: agent.Scope(), Operation: "order.refund", Fingerprint: "fp"},
			Key:         "once-2", Lease: time.Minute, Retention: time.Hour,
		})
		if err != nil || !res.Reserved {
			t.Fatalf("Reserve = %+v, %v", res, err)
		}
		held := idem.Fence{Scope: agent.Scope(), Key: "once-2", FencingToken: res.Attempt.FencingToken}
		stale := held
		stale.FencingToken++
		err = e.app.db.InTx(t.Context(), func(tx *Tx) error {
			if err := checkFence(t.Context(), tx, held); err != nil {
				return err
			}
			return checkFence(t.Context(), tx, stale)
		})
		if !errors.Is(err, idem.ErrFenced) {
			t.Fatalf("a stale fence checked after a held one in one transaction: err = %v, want ErrFenced", err)
		}
	})
}
