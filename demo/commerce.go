package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/idem-run/idem"
)

// The commerce half of the reference application (SPEC §12): orders and
// refunds through the payment gateway simulator (order.go, gateway.go),
// usage limits (limit.go), service accounts (serviceaccount.go) and
// agreements (agreement.go).

// Fixture counts of SPEC §12, per org.
const (
	fixtureOrders          = 100
	fixtureOrderAmount     = 10000 // cents
	fixtureSubscriptions   = 5
	fixtureServiceAccounts = 5
)

// commerceOperations: orders, refunds, limits, service accounts, agreements.
func (a *App) commerceOperations() []idem.Operation {
	var ops []idem.Operation
	ops = append(ops, a.orderOperations()...)
	ops = append(ops, a.limitOperations()...)
	ops = append(ops, a.serviceAccountOperations()...)
	ops = append(ops, a.agreementOperations()...)
	return ops
}

// seedCommerce creates an org's commerce fixtures, leaving rows that exist
// alone (several instances may start at once, and a restart must not undo
// refunds, limits or approvals).
func (a *App) seedCommerce(ctx context.Context, org string) error {
	now := micros(a.now())
	return a.db.InTx(ctx, func(tx *Tx) error {
		var rows [][]any
		for i := 1; i <= fixtureOrders; i++ {
			rows = append(rows, []any{org, fmt.Sprintf("ord_%d", i), fixtureOrderAmount, now})
		}
		if err := insertIgnoring(ctx, tx, "idem_demo_orders (org, id, amount, created_at)", rows); err != nil {
			return fmt.Errorf("orders: %w", err)
		}
		rows = rows[:0]
		for i := 1; i <= fixtureSubscriptions; i++ {
			rows = append(rows, []any{org, fmt.Sprintf("sub_%d", i), now})
		}
		if err := insertIgnoring(ctx, tx, "idem_demo_subscriptions (org, id, created_at)", rows); err != nil {
			return fmt.Errorf("subscriptions: %w", err)
		}
		rows = rows[:0]
		for i := 1; i <= fixtureServiceAccounts; i++ {
			rows = append(rows, []any{org, fmt.Sprintf("sa_%d", i), fmt.Sprintf("service account %d", i), serviceAccountPending, now})
		}
		if err := insertIgnoring(ctx, tx, "idem_demo_service_accounts (org, id, name, status, created_at)", rows); err != nil {
			return fmt.Errorf("service accounts: %w", err)
		}
		return nil
	})
}

// insertIgnoring inserts rows into "table (columns)" in one statement;
// rows whose primary key exists are left as they are.
func insertIgnoring(ctx context.Context, tx *Tx, into string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(rows[0])), ", ") + ")"
	tuples := make([]string, len(rows))
	var args []any
	for i, r := range rows {
		tuples[i] = tuple
		args = append(args, r...)
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+into+" VALUES "+strings.Join(tuples, ", ")+" ON CONFLICT DO NOTHING", args...)
	return err
}

func (a *App) commerceRoutes() map[string]func(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	return map[string]func(w http.ResponseWriter, r *http.Request, p idem.Principal){
		"GET /v1/demo/gateway/ledger": a.serveGatewayLedger,
	}
}

// commerceID returns prefix followed by 20 random hex digits: the ids of
// refunds, limits and agreements.
func commerceID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
