package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The first-2p phase refunds orders the harness prepares before it, in
// the demo's orders table of the org of demo-agent: as many as the phase
// could refund at 10,000/s, so that no order is refunded twice unless
// the phase outruns that.

// benchOrders is how many orders to prepare for a phase of length d.
func benchOrders(d time.Duration) int {
	return max(1000, int(10000*d.Seconds()))
}

// benchOrderAmount is each prepared order's amount, in cents.
const benchOrderAmount = 10000

// refundOrder is the order that client w of clients refunds in its
// request i, of n prepared: ord_bench_1 … ord_bench_n, each once while
// the phase sends fewer than n requests (client w takes w+1, w+1+clients,
// …), then again from the start.
func refundOrder(n, clients, w, i int) string {
	return fmt.Sprintf("ord_bench_%d", 1+(w+clients*i)%n)
}

// prepareOrders inserts orders ord_bench_1 … ord_bench_n into the demo's
// orders table of the store at sqlitePath (SQLite) or storeURL
// (PostgreSQL), leaving any that exist as they are.
func prepareOrders(ctx context.Context, sqlitePath, storeURL string, n int) error {
	now := time.Now().UnixMicro()
	if sqlitePath != "" {
		db, err := sql.Open("sqlite", sqliteDSN(sqlitePath))
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
			INSERT OR IGNORE INTO idem_demo_orders (org, id, amount, created_at)
			SELECT 'acme', 'ord_bench_' || i, ?, ? FROM s`, n, benchOrderAmount, now)
		return err
	}
	conn, err := pgx.Connect(ctx, storeURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO idem_demo_orders (org, id, amount, created_at)
		SELECT 'acme', 'ord_bench_' || i, $2, $3 FROM generate_series(1, $1::int) AS i
		ON CONFLICT DO NOTHING`, n, benchOrderAmount, now)
	return err
}
