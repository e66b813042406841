package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idem-run/idem"
)

// refundApprovalThreshold is the largest refund, in cents, that needs no
// approval.
const refundApprovalThreshold = 5000

// orderRefundsShown is how many of an order's refunds an order view
// lists: the newest ones.
const orderRefundsShown = 20

// orderView is an order with its newest refunds: what order.show answers.
type orderView struct {
	ID string `json:"id"`
	// Amount is what was paid, in cents.
	Amount int64 `json:"amount"`
	// Refunded is the total refunded so far, in cents.
	Refunded int64 `json:"refunded"`
	// Remaining is what can still be refunded, in cents.
	Remaining int64 `json:"remaining"`
	// RefundCount counts all the order's refunds; Refunds lists the newest
	// orderRefundsShown of them, oldest first, so the list is complete when
	// its length equals RefundCount.
	RefundCount int64        `json:"refundCount" jsonschema:"description=how many refunds the order has; refunds lists the newest 20 of them"`
	Refunds     []refundView `json:"refunds" jsonschema:"description=the order's newest refunds (at most 20) oldest first"`
	CreatedAt   time.Time    `json:"createdAt"`
}

// refundView is one refund of an order.
type refundView struct {
	ID      string `json:"id"`
	OrderID string `json:"orderId"`
	Amount  int64  `json:"amount"`
	// ExecutionID is the execution that made the refund, so that a caller
	// reconciling an ambiguous answer can find its own.
	ExecutionID string    `json:"executionId"`
	CreatedAt   time.Time `json:"createdAt"`
}

type orderShowInput struct {
	ID string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=200"`
}

type refundInput struct {
	ID string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=200"`
	// Amount to refund, in cents.
	Amount   int64           `json:"amount" jsonschema:"minimum=1,description=amount to refund in cents; over 5000 needs an approval"`
	Simulate *refundSimulate `json:"simulate,omitempty" jsonschema:"description=demo fault injection around the gateway call"`
}

// refundSimulate injects faults around the gateway call (SPEC §12). It
// exists only in the demo: order.refund is registered only under --demo.
type refundSimulate struct {
	// DelayMs sleeps before the gateway call, honouring cancellation.
	DelayMs int `json:"delayMs,omitempty" jsonschema:"minimum=0,maximum=60000,description=sleep this many milliseconds before the gateway call (honours cancellation)"`
	// FailAfterEffect applies the refund, then fails (not retryable).
	FailAfterEffect bool `json:"failAfterEffect,omitempty" jsonschema:"description=apply the refund then fail: 500 EXECUTION_FAILED and an indeterminate key"`
	// FailBeforeEffect fails every attempt before the gateway call with a
	// retryable error.
	FailBeforeEffect bool `json:"failBeforeEffect,omitempty" jsonschema:"description=fail every attempt before the gateway call with a retryable error"`
	// TimeoutOnce makes the first attempt outlive its timeout before it
	// reaches the gateway; the runtime retry then runs normally.
	TimeoutOnce bool `json:"timeoutOnce,omitempty" jsonschema:"description=make the first attempt outlive its 5 s timeout before the gateway call; the runtime retry succeeds"`
}

// refundResult is what order.refund answers: the refund it made and the
// order as that attempt left it.
type refundResult struct {
	Refund refundView `json:"refund"`
	Order  orderView  `json:"order"`
}

func (a *App) orderOperations() []idem.Operation {
	unknownOrder := idem.Declare(idem.CodeNotFound, "No order with this id exists in the caller's org.")
	return []idem.Operation{
		idem.Define(idem.Metadata{
			Name: "order.show", Method: "GET", Path: "/v1/orders/{id}",
			Summary:    "Show an order: its amount, the total refunded, its number of refunds and the newest 20",
			SideEffect: idem.SideEffectRead,
			Retry: idem.RetryContract{Kind: idem.RetryFreshRead,
				Rationale: "A read of the order's current state: it always executes and is never served from a stored attempt."},
			Errors: []idem.DeclaredError{unknownOrder},
		}, a.showOrder),

		idem.Define(idem.Metadata{
			Name: "order.refund", Method: "POST", Path: "/v1/orders/{id}/refund",
			Summary:    "Refund part or all of an order through the payment gateway; refunds over 5000 cents need approval",
			SideEffect: idem.SideEffectWrite,
			Idempotent: true, RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 1}, Timeout: 5 * time.Second,
			Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "order.show",
				Rationale: "A refund moves money, so a retry must replay the first attempt's result rather than refund again; the handler forwards its execution key to the payment gateway, which deduplicates on it, so its own runtime retry is safe too. A replay proves what that attempt did, not the order's current state: run order.show before reporting it."},
			Approval: idem.ApprovalPolicy,
			Errors: []idem.DeclaredError{unknownOrder,
				idem.Declare(CodeAlreadyRefunded, "The refund exceeds what is left to refund on the order (details.remaining); run order.show to see its refunds.")},
		}, a.refundOrder).WithPolicies(refundApprovalPolicy),
	}
}

// refundApprovalPolicy asks for approval of refunds over
// refundApprovalThreshold.
var refundApprovalPolicy = idem.PolicyFor("refund-approval", func(_ context.Context, _ idem.Principal, in refundInput) (idem.PolicyDecision, error) {
	if in.Amount > refundApprovalThreshold {
		return idem.PolicyDecision{Effect: idem.RequireApproval,
			Reason: fmt.Sprintf("refunds over %d cents need an approver's approval (this one is %d cents on order %s)", refundApprovalThreshold, in.Amount, in.ID)}, nil
	}
	return idem.PolicyDecision{Effect: idem.Allow}, nil
})

func (a *App) showOrder(ctx context.Context, call *idem.Call, in orderShowInput) (orderView, error) {
	var out orderView
	err := a.db.InTx(ctx, func(tx *Tx) error {
		var err error
		out, err = loadOrder(ctx, tx, call.Principal.Org, in.ID, false)
		return err
	})
	return out, err
}

// refundOrder checks the business rule and calls the gateway in one
// transaction, with the order row locked, so that concurrent refunds of
// one order cannot both pass the check.
//
// That transaction holds the gateway's effect, so when it fails for the
// store (a full disk, an unreachable database) nothing was refunded, and
// the error is returned NotDispatched (DB.notCommitted): the pipeline frees
// the key and gives the approval back (SPEC §8), and the caller's 503
// STORE_UNAVAILABLE is retryable with the same key. A COMMIT whose failure
// may be a lie is kept out: on PostgreSQL a COMMIT whose answer was lost
// stays indeterminate. On SQLite a COMMIT whose frames were written but not
// synced is overwritten by the next write, the release among them; only a
// crash before that brings it back, and then the reservation, in the same
// file and never released, holds the key with it.
func (a *App) refundOrder(ctx context.Context, call *idem.Call, in refundInput) (refundResult, error) {
	var sim refundSimulate
	if in.Simulate != nil {
		sim = *in.Simulate
	}
	if sim.TimeoutOnce && call.Attempt == 1 {
		// Outlive the attempt's timeout without reaching the gateway: the
		// runtime answers TIMEOUT and retries.
		<-ctx.Done()
		return refundResult{}, ctx.Err()
	}
	if sim.FailBeforeEffect {
		return refundResult{}, idem.Retryable(errors.New("simulated failure before the gateway call (simulate.failBeforeEffect)"))
	}
	if sim.DelayMs > 0 {
		t := time.NewTimer(time.Duration(sim.DelayMs) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return refundResult{}, ctx.Err()
		}
	}

	org := call.Principal.Org
	var out refundResult
	err := a.db.InTx(ctx, func(tx *Tx) error {
		order, err := loadOrder(ctx, tx, org, in.ID, true)
		if err != nil {
			return err
		}
		// The refund commits only while this execution holds its lease.
		if err := checkFence(ctx, tx, call.Fence()); err != nil {
			return err
		}
		gw := gatewayRefundParams{
			Org: org, Key: call.IdempotencyKey, Fence: call.Fence(), Principal: call.Principal.ID, RequestKey: call.RequestKey,
			ExecutionID: call.ExecutionID, OrderID: in.ID, Amount: in.Amount,
		}
		// A runtime retry of an attempt whose effect committed: the gateway
		// is called again with the same key (it deduplicates) and the
		// refund already made is the answer.
		if r, err := refundByKey(ctx, tx, org, in.ID, gw.Key); err != nil {
			return err
		} else if r != nil {
			if _, _, err := gatewayRefund(ctx, tx, a.now(), gw); err != nil {
				return err
			}
			out = refundResult{Refund: *r, Order: order}
			return nil
		}
		if in.Amount > order.Remaining {
			return idem.Errorf(CodeAlreadyRefunded, "order %s has %d of %d cents left to refund; a refund of %d cents would exceed it", in.ID, order.Remaining, order.Amount, in.Amount).
				WithDetail("orderId", in.ID).WithDetail("orderAmount", order.Amount).
				WithDetail("refunded", order.Refunded).WithDetail("remaining", order.Remaining)
		}
		if _, applied, err := gatewayRefund(ctx, tx, a.now(), gw); err != nil {
			return err
		} else if !applied {
			return fmt.Errorf("gateway already knew key %s, but no refund of order %s carries it", gw.Key, in.ID)
		}
		r := refundView{ID: commerceID("rf_"), OrderID: in.ID, Amount: in.Amount, ExecutionID: call.ExecutionID, CreatedAt: a.now()}
		if _, err := tx.Exec(ctx, `INSERT INTO idem_demo_refunds (org, id, order_id, amount, gateway_key, execution_id, principal, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, org, r.ID, r.OrderID, r.Amount, gw.Key, r.ExecutionID, gw.Principal, micros(r.CreatedAt)); err != nil {
			return fmt.Errorf("record refund of %s: %w", in.ID, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE idem_demo_orders SET refunded = refunded + ?, refund_count = refund_count + 1
			WHERE org = ? AND id = ?`, r.Amount, org, in.ID); err != nil {
			return fmt.Errorf("record refund of %s: %w", in.ID, err)
		}
		order.Refunds = append(order.Refunds, r)
		if len(order.Refunds) > orderRefundsShown {
			order.Refunds = order.Refunds[len(order.Refunds)-orderRefundsShown:]
		}
		order.RefundCount++
		order.Refunded += r.Amount
		order.Remaining -= r.Amount
		out = refundResult{Refund: r, Order: order}
		return nil
	})
	if err != nil {
		return refundResult{}, a.db.notCommitted(ctx, err)
	}
	if sim.FailAfterEffect {
		return refundResult{}, errors.New("simulated failure after the gateway applied the refund (simulate.failAfterEffect)")
	}
	return out, nil
}

// loadOrder reads an order with its newest refunds, locking the order row
// when lock is set: two indexed reads, whatever the number of refunds.
func loadOrder(ctx context.Context, tx *Tx, org, id string, lock bool) (orderView, error) {
	q := `SELECT amount, refunded, refund_count, created_at FROM idem_demo_orders WHERE org = ? AND id = ?`
	if lock {
		q += tx.d.forUpdate()
	}
	o := orderView{ID: id}
	var created int64
	if err := tx.QueryRow(ctx, q, org, id).Scan(&o.Amount, &o.Refunded, &o.RefundCount, &created); errors.Is(err, sql.ErrNoRows) {
		return orderView{}, notFound("order", id)
	} else if err != nil {
		return orderView{}, fmt.Errorf("read order %s: %w", id, err)
	}
	o.CreatedAt = fromMicros(created)
	o.Remaining = o.Amount - o.Refunded
	rows, err := tx.Query(ctx, `SELECT id, amount, execution_id, created_at FROM idem_demo_refunds
		WHERE org = ? AND order_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`, org, id, orderRefundsShown)
	if err != nil {
		return orderView{}, fmt.Errorf("read refunds of %s: %w", id, err)
	}
	newest, err := collect(rows, func(row rowScanner) (refundView, error) { return scanRefund(row, id) })
	if err != nil {
		return orderView{}, fmt.Errorf("read refunds of %s: %w", id, err)
	}
	slices.Reverse(newest)
	o.Refunds = newest
	return o, nil
}

// refundByKey reads the refund of order id that carries a gateway key (a
// runtime retry's own: the key is the execution's) by the unique
// (org, gateway_key) index, nothing else; nil, nil when there is none.
func refundByKey(ctx context.Context, tx *Tx, org, id, key string) (*refundView, error) {
	var orderID string
	r, err := scanRefund(tx.QueryRow(ctx, `SELECT id, amount, execution_id, created_at, order_id FROM idem_demo_refunds
		WHERE org = ? AND gateway_key = ?`, org, key), id, &orderID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && orderID != id) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read refund of %s: %w", id, err)
	}
	return &r, nil
}

// scanRefund scans a refund of order orderID (id, amount, execution_id,
// created_at), then any more columns into extra.
func scanRefund(row rowScanner, orderID string, extra ...any) (refundView, error) {
	r := refundView{OrderID: orderID}
	var at int64
	err := row.Scan(append([]any{&r.ID, &r.Amount, &r.ExecutionID, &at}, extra...)...)
	r.CreatedAt = fromMicros(at)
	return r, err
}
