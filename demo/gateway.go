package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/sqlitestore"
)

// The payment gateway simulator of SPEC §12. It models a real gateway that
// deduplicates on the key its caller forwards: the first call with a key
// applies the refund, every later call with that key applies nothing and
// answers with the original effect, but is counted. Its ledger is a table
// in the demo's database, so it is shared by instances and survives
// restarts; GET /v1/demo/gateway/ledger shows it, and it is what proves
// that a retry never re-executed: one execution id per (principal,
// requestKey).

// gatewayEffect is one ledger row: everything the gateway received under
// one key.
type gatewayEffect struct {
	// Key is the handler key the gateway received (call.IdempotencyKey).
	Key string `json:"key"`
	// Principal is the id of the principal whose execution called.
	Principal string `json:"principal"`
	// RequestKey is the client's Idempotency-Key, null for unkeyed calls.
	RequestKey *string `json:"requestKey"`
	OrderID    string  `json:"orderId"`
	Amount     int64   `json:"amount"`
	// Calls counts the gateway calls that carried Key.
	Calls int64 `json:"calls"`
	// Applied reports whether the refund took effect.
	Applied bool `json:"applied"`
	// ExecutionIDs lists every execution that called with Key, in order.
	ExecutionIDs []string `json:"executionIds"`
}

// gatewayRefundParams is one refund call to the gateway.
type gatewayRefundParams struct {
	Org string
	Key string // the idempotency key the gateway deduplicates on
	// Fence is the caller's reservation, forwarded with the key: the
	// gateway applies nothing once it no longer holds (checkFence).
	Fence       idem.Fence
	Principal   string
	RequestKey  string // "" for unkeyed calls
	ExecutionID string
	OrderID     string
	Amount      int64
}

const gatewayColumns = `handler_key, principal, request_key, order_id, amount, calls, applied, execution_ids`

// gatewayRefund calls the gateway inside the caller's transaction, so that
// the business rule checked there and the effect commit together. It
// reports whether this call applied the refund (false: the key was seen
// before, and the effect returned is the original one).
func gatewayRefund(ctx context.Context, tx *Tx, now time.Time, p gatewayRefundParams) (gatewayEffect, bool, error) {
	// The gateway's effect commits in this transaction: it is checked
	// here, whatever its caller checked before.
	if err := checkFence(ctx, tx, p.Fence); err != nil {
		return gatewayEffect{}, false, err
	}
	var requestKey *string
	if p.RequestKey != "" {
		requestKey = &p.RequestKey
	}
	ids, _ := json.Marshal([]string{p.ExecutionID})
	n, err := tx.Exec(ctx, `INSERT INTO idem_demo_gateway_effects (org, `+gatewayColumns+`, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?) ON CONFLICT (org, handler_key) DO NOTHING`,
		p.Org, p.Key, p.Principal, requestKey, p.OrderID, p.Amount, true, string(ids), micros(now), micros(now))
	if err != nil {
		return gatewayEffect{}, false, fmt.Errorf("gateway refund %s: %w", p.Key, err)
	}
	if n == 1 {
		return gatewayEffect{
			Key: p.Key, Principal: p.Principal, RequestKey: requestKey, OrderID: p.OrderID, Amount: p.Amount,
			Calls: 1, Applied: true, ExecutionIDs: []string{p.ExecutionID},
		}, true, nil
	}

	// A key seen before: count the call, remember the execution, apply
	// nothing.
	e, err := scanGatewayEffect(tx.QueryRow(ctx, `SELECT `+gatewayColumns+` FROM idem_demo_gateway_effects
		WHERE org = ? AND handler_key = ?`+tx.d.forUpdate(), p.Org, p.Key))
	if err != nil {
		return gatewayEffect{}, false, fmt.Errorf("gateway refund %s: %w", p.Key, err)
	}
	e.Calls++
	if !slices.Contains(e.ExecutionIDs, p.ExecutionID) {
		e.ExecutionIDs = append(e.ExecutionIDs, p.ExecutionID)
	}
	ids, _ = json.Marshal(e.ExecutionIDs)
	if _, err := tx.Exec(ctx, `UPDATE idem_demo_gateway_effects SET calls = ?, execution_ids = ?, updated_at = ?
		WHERE org = ? AND handler_key = ?`, e.Calls, string(ids), micros(now), p.Org, p.Key); err != nil {
		return gatewayEffect{}, false, fmt.Errorf("gateway refund %s: %w", p.Key, err)
	}
	return e, false, nil
}

// fenceMargin is the lease an effect must have left to commit: more than
// its transaction needs, so that the executor's completion usually lands
// within the lease too.
const fenceMargin = time.Second

// checkFence makes the rest of tx conditional on the lease of fence (SPEC
// §6.8), with the fence check of the store the demo shares its database
// with: a paused or late executor's effect cannot commit once a same-key
// request has been told that the result is indeterminate. A check that
// passed holds the record until tx ends, so a second check of the same
// fence in tx (the handler's, then the gateway's) could only pass again:
// it is not sent (two statements on PostgreSQL, issue 36).
func checkFence(ctx context.Context, tx *Tx, fence idem.Fence) error {
	if fence.FencingToken != 0 && tx.fenced == fence {
		return nil
	}
	if err := checkStoreFence(ctx, tx, fence); err != nil {
		return err
	}
	tx.fenced = fence
	return nil
}

// checkStoreFence is the store's fence check in tx; a variable for tests.
var checkStoreFence = func(ctx context.Context, tx *Tx, fence idem.Fence) error {
	switch q := tx.q.(type) {
	case pgxTx:
		return pgstore.CheckFencePgx(ctx, q.tx, fence, fenceMargin)
	case sqlTx:
		return sqlitestore.CheckFence(ctx, q.tx, fence, fenceMargin)
	}
	return fmt.Errorf("demo: check the fence of key %q: a %T transaction", fence.Key, tx.q)
}

// scanGatewayEffect scans the gatewayColumns of a row, then any more
// columns into extra.
func scanGatewayEffect(row rowScanner, extra ...any) (gatewayEffect, error) {
	var e gatewayEffect
	var requestKey sql.NullString
	var ids string
	if err := row.Scan(append([]any{&e.Key, &e.Principal, &requestKey, &e.OrderID, &e.Amount, &e.Calls, &e.Applied, &ids}, extra...)...); err != nil {
		return gatewayEffect{}, err
	}
	if requestKey.Valid {
		e.RequestKey = &requestKey.String
	}
	if err := json.Unmarshal([]byte(ids), &e.ExecutionIDs); err != nil {
		return gatewayEffect{}, fmt.Errorf("execution ids of %s: %w", e.Key, err)
	}
	return e, nil
}

// gatewayLedger reads one page of an org's ledger, in the order the keys
// first arrived.
func (a *App) gatewayLedger(ctx context.Context, org string, limit int, cursor string) ([]gatewayEffect, *string, error) {
	var effects []gatewayEffect
	var next *string
	err := a.db.InTx(ctx, func(tx *Tx) error {
		var err error
		effects, next, err = readPage(ctx, tx, byArrival, limit, cursor,
			`SELECT `+gatewayColumns+`, created_at FROM idem_demo_gateway_effects WHERE org = ?`, []any{org},
			func(row rowScanner) (gatewayEffect, []any, error) {
				var created int64
				e, err := scanGatewayEffect(row, &created)
				return e, []any{created, e.Key}, err
			})
		return err
	})
	return effects, next, err
}

// serveGatewayLedger answers GET /v1/demo/gateway/ledger[?limit=&cursor=]
// with one page of the caller's org's ledger:
// {"data": {"effects": [...], "nextCursor": …}}, bounded like every list.
func (a *App) serveGatewayLedger(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	resp, err := a.ledgerResponse(r.Context(), p.Org, r.URL.Query())
	if err != nil {
		resp = idem.ErrorResult(err, nil)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body())
}

func (a *App) ledgerResponse(ctx context.Context, org string, query url.Values) (idem.Result, error) {
	limit, cursor, err := ledgerPage(query)
	if err != nil {
		return idem.Result{}, err
	}
	effects, next, err := a.gatewayLedger(ctx, org, limit, cursor)
	if err != nil {
		return idem.Result{}, err
	}
	var body struct {
		Data struct {
			Effects    []gatewayEffect `json:"effects"`
			NextCursor *string         `json:"nextCursor"`
		} `json:"data"`
	}
	body.Data.Effects, body.Data.NextCursor = effects, next
	raw, err := json.Marshal(body)
	if err != nil {
		return idem.Result{}, err
	}
	return idem.ParseResult(http.StatusOK, http.Header{"Content-Type": {idem.ContentTypeJSON}}, raw)
}

// ledgerPage reads the ledger route's query: limit (1…ledgerLimitMax,
// ledgerLimitMax when absent) and
// cursor, each at most once, and nothing else, as an operation's
// parameters are checked.
func ledgerPage(query url.Values) (int, string, error) {
	limit := ledgerLimitMax
	for name, vs := range query {
		if len(vs) != 1 {
			return 0, "", errPageParam(name, "query parameter %s is given %d times; give it once", name, len(vs))
		}
		switch name {
		case "limit":
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < 1 || n > ledgerLimitMax {
				return 0, "", errPageParam(name, "limit must be an integer from 1 to %d, got %q", ledgerLimitMax, vs[0])
			}
			limit = n
		case "cursor":
			if vs[0] == "" {
				return 0, "", errPageParam(name, "%s", cursorHelp)
			}
		default:
			return 0, "", errPageParam(name, "query parameter %q is not a parameter of the gateway ledger (limit, cursor)", name)
		}
	}
	return limit, query.Get("cursor"), nil
}
