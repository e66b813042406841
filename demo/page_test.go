package demo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idem-run/idem"
)

// TestOrderRefundsBounded makes more refunds of one order than an order
// view lists: every answer (order.refund's and order.show's) carries the
// right total and count and only the newest refunds, oldest first.
func TestOrderRefundsBounded(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		const n = 30
		var made []refundView
		for i := 1; i <= n; i++ {
			var res refundResult
			e.call(t, refund("", "ord_20", `{"amount": 1}`, fmt.Sprintf("cent-%d", i))).must(t, 200, "").into(t, &res)
			made = append(made, res.Refund)
			o := res.Order
			if o.Refunded != int64(i) || o.Remaining != 10000-int64(i) || o.RefundCount != int64(i) ||
				len(o.Refunds) != min(i, orderRefundsShown) || o.Refunds[len(o.Refunds)-1] != res.Refund {
				t.Fatalf("refund %d: order %+v", i, o)
			}
		}
		o := e.order(t, "ord_20")
		if o.Refunded != n || o.Remaining != 10000-n || o.RefundCount != n || len(o.Refunds) != orderRefundsShown {
			t.Fatalf("order.show: refunded %d, remaining %d, count %d, %d refunds listed", o.Refunded, o.Remaining, o.RefundCount, len(o.Refunds))
		}
		if want := made[n-orderRefundsShown:]; !slices.Equal(o.Refunds, want) {
			t.Fatalf("order.show lists %+v, want the newest %d oldest first: %+v", o.Refunds, orderRefundsShown, want)
		}
		// The business rule uses the stored total: what is left is refundable,
		// no more.
		e.call(t, refund("", "ord_20", `{"amount": 5000}`, "half")).must(t, 200, "")
		if o := e.order(t, "ord_20"); o.Refunded != n+5000 || o.RefundCount != n+1 || o.Refunds[len(o.Refunds)-1].Amount != 5000 {
			t.Fatalf("after a larger refund: %+v", o)
		}
		e.call(t, refund("", "ord_20", fmt.Sprintf(`{"amount": %d}`, 10000-n-5000+1), "too-much")).must(t, 409, CodeAlreadyRefunded)
		e.call(t, refund("", "ord_20", fmt.Sprintf(`{"amount": %d}`, 10000-n-5000), "the-rest")).must(t, 200, "")
	})
}

// TestRefundRetryFindsItsRefundPastTheBound: a runtime retry of an attempt
// whose refund committed, after more later refunds of the order than an
// order view lists, still answers its own refund and refunds nothing more.
func TestRefundRetryFindsItsRefundPastTheBound(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		call := &idem.Call{Operation: "order.refund", ExecutionID: "exe_early", Attempt: 1, Principal: Tokens()["demo-agent"], IdempotencyKey: "ik_early", RequestKey: "rk"}
		in := refundInput{ID: "ord_21", Amount: 100}
		first, err := e.app.refundOrder(ctx, call, in)
		if err != nil {
			t.Fatal(err)
		}
		later := orderRefundsShown + 5
		for i := range later {
			e.call(t, refund("", "ord_21", `{"amount": 1}`, fmt.Sprintf("later-%d", i))).must(t, 200, "")
		}
		call.Attempt = 2
		second, err := e.app.refundOrder(ctx, call, in)
		if err != nil {
			t.Fatal(err)
		}
		if second.Refund != first.Refund || second.Order.Refunded != 100+int64(later) || second.Order.RefundCount != 1+int64(later) {
			t.Fatalf("second attempt: refund %+v (first %+v), order refunded %d, count %d", second.Refund, first.Refund, second.Order.Refunded, second.Order.RefundCount)
		}
		if slices.Contains(second.Order.Refunds, first.Refund) {
			t.Fatal("the early refund is still among the newest")
		}
		for _, g := range e.ledger(t, "demo-agent") {
			if g.Key == "ik_early" && (g.Calls != 2 || len(g.ExecutionIDs) != 1) {
				t.Fatalf("ledger: %+v", g)
			}
		}
	})
}

// TestMigrationBackfillsRefundTotals runs migration 004 on refunds made
// before it: the orders' totals and counts come from them.
func TestMigrationBackfillsRefundTotals(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		for i, amount := range []int{100, 250, 1} {
			e.call(t, refund("", "ord_22", fmt.Sprintf(`{"amount": %d}`, amount), fmt.Sprintf("before-%d", i))).must(t, 200, "")
		}
		e.call(t, refund("demo-other-org", "ord_22", `{"amount": 7}`, "before-globex")).must(t, 200, "")
		// Back to the schema before 004 (the refunds stay), then migrate.
		for _, q := range []string{
			`ALTER TABLE idem_demo_orders DROP COLUMN refunded`,
			`ALTER TABLE idem_demo_orders DROP COLUMN refund_count`,
			`DELETE FROM idem_demo_schema_migrations WHERE version = 4`,
		} {
			if err := e.app.db.InTx(ctx, func(tx *Tx) error { _, err := tx.Exec(ctx, q); return err }); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if err := e.app.db.migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if o := e.order(t, "ord_22"); o.Refunded != 351 || o.RefundCount != 3 || len(o.Refunds) != 3 || o.Remaining != 10000-351 {
			t.Fatalf("acme ord_22: %+v", o)
		}
		var g orderView
		e.call(t, req{token: "demo-other-org", op: "order.show", path: map[string]string{"id": "ord_22"}}).must(t, 200, "").into(t, &g)
		if g.Refunded != 7 || g.RefundCount != 1 {
			t.Fatalf("globex ord_22: %+v", g)
		}
		if o := e.order(t, "ord_23"); o.Refunded != 0 || o.RefundCount != 0 || len(o.Refunds) != 0 {
			t.Fatalf("ord_23: %+v", o)
		}
	})
}

// listCase is one list read: how to call it and how to add a row to it.
type listCase struct {
	op    string
	path  map[string]string
	field string                                // the list's member of the answer
	add   func(t *testing.T, e *testEnv, i int) // adds the list's i-th row
}

func listCases(t *testing.T, e *testEnv) []listCase {
	createBusiness(t, e, "quillby")
	slug := map[string]string{"slug": "quillby"}
	rcv := newReceiver(t, http.StatusNoContent)
	hook := createWebhook(t, e, rcv.srv.URL)
	return []listCase{
		{"business.list", nil, "businesses", func(t *testing.T, e *testEnv, i int) {
			createBusiness(t, e, fmt.Sprintf("biz-%d", i))
		}},
		{"backend.list", slug, "backends", func(t *testing.T, e *testEnv, i int) {
			e.call(t, req{op: "backend.bind", path: map[string]string{"slug": "quillby", "name": fmt.Sprintf("api-%d", i/2)},
				query: url.Values{"environment": {[]string{"preview", "production"}[i%2]}}, body: `{"originUrl":"https://o.example.com"}`}).must(t, 200, "")
		}},
		{"webhook.list", slug, "webhooks", func(t *testing.T, e *testEnv, i int) {
			createWebhook(t, e, fmt.Sprintf("https://hooks.example.com/%d", i))
		}},
		{"webhook.deliveries", map[string]string{"slug": "quillby", "id": hook.ID}, "deliveries", func(t *testing.T, e *testEnv, i int) {
			e.call(t, req{op: "webhook.trigger", path: map[string]string{"slug": "quillby", "id": hook.ID},
				body: `{"type":"payment.failed"}`, key: fmt.Sprintf("trigger-%d", i)}).must(t, 200, "")
		}},
		{"token.list", nil, "tokens", func(t *testing.T, e *testEnv, i int) {
			e.call(t, req{op: "token.mint", body: `{"name":"ci","scopes":["read"]}`, key: fmt.Sprintf("mint-%d", i)}).must(t, 201, "")
		}},
		{"limit.list", map[string]string{"sub": "sub_1"}, "limits", func(t *testing.T, e *testEnv, i int) {
			e.call(t, req{op: "limit.create", path: map[string]string{"sub": "sub_1"}, body: fmt.Sprintf(`{"subject":"s-%d","quantity":1}`, i)}).must(t, 201, "")
		}},
		{"agreement.list", slug, "agreements", func(t *testing.T, e *testEnv, i int) {
			e.call(t, req{op: "agreement.create", path: slug, body: `{"terms":{"plan":"team","seats":1}}`, key: fmt.Sprintf("agree-%d", i)}).must(t, 201, "")
		}},
	}
}

// listPage calls a list with query and returns its rows (raw) and
// nextCursor.
func (e *testEnv) listPage(t *testing.T, c listCase, query url.Values) ([]json.RawMessage, *string) {
	t.Helper()
	r := e.call(t, req{op: c.op, path: c.path, query: query}).must(t, 200, "")
	var page map[string]json.RawMessage
	r.into(t, &page)
	var rows []json.RawMessage
	var next *string
	if err := json.Unmarshal(page[c.field], &rows); err != nil || rows == nil {
		t.Fatalf("%s: %s: %v", c.op, r.Data, err)
	}
	if raw, ok := page["nextCursor"]; !ok {
		t.Fatalf("%s: no nextCursor in %s", c.op, r.Data)
	} else if err := json.Unmarshal(raw, &next); err != nil {
		t.Fatalf("%s: nextCursor %s: %v", c.op, raw, err)
	}
	return rows, next
}

// TestListPages: every list answers at most ?limit= rows and a cursor that
// walks it, page by page, through the same rows in the same order as one
// big page; a bad limit or cursor is 400 INVALID_INPUT.
func TestListPages(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		for _, c := range listCases(t, e) {
			t.Run(c.op, func(t *testing.T) {
				whole, _ := e.listPage(t, c, nil)
				for i := range 5 {
					c.add(t, e, i)
				}
				all, next := e.listPage(t, c, url.Values{"limit": {"100"}})
				if len(all) != len(whole)+5 || next != nil {
					t.Fatalf("%d rows, next %v; want %d and null", len(all), next, len(whole)+5)
				}
				var walked []json.RawMessage
				pages := 0
				for cursor := ""; ; pages++ {
					q := url.Values{"limit": {"2"}}
					if cursor != "" {
						q.Set("cursor", cursor)
					}
					rows, next := e.listPage(t, c, q)
					if len(rows) > 2 || (next != nil) != (len(walked)+len(rows) < len(all)) {
						t.Fatalf("page %d: %d rows, next %v", pages, len(rows), next)
					}
					walked = append(walked, rows...)
					if next == nil {
						break
					}
					cursor = *next
				}
				if fmt.Sprint(walked) != fmt.Sprint(all) {
					t.Fatalf("paged:\n%s\nwhole:\n%s", walked, all)
				}

				cursor := func(s string) url.Values {
					return url.Values{"cursor": {base64.RawURLEncoding.EncodeToString([]byte(s))}}
				}
				for _, q := range []url.Values{
					{"limit": {"0"}}, {"limit": {"101"}}, {"limit": {"ten"}}, {"cursor": {""}}, {"cursor": {"not a cursor"}},
					cursor(`[1]`), cursor(`["\u0000"]`), cursor(`[1, "\u0000"]`), cursor(`["a", "b", "c"]`), cursor(`["\xff"]`),
					cursor(`{"a":1}`), {"cursor": {base64.RawURLEncoding.EncodeToString([]byte("[\"\xff\"]"))}},
				} {
					e.call(t, req{op: c.op, path: c.path, query: q}).must(t, 400, idem.CodeInvalidInput)
				}
			})
		}
	})
}

// TestListDefaultLimit: without ?limit= a list answers listLimitDefault
// rows and a cursor to the rest.
func TestListDefaultLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		var rows [][]any
		for i := range listLimitDefault + 1 {
			rows = append(rows, []any{"acme", fmt.Sprintf("b-%03d", i), "B", "agent-1", micros(e.app.now())})
		}
		if err := e.app.db.InTx(context.Background(), func(tx *Tx) error {
			return insertIgnoring(context.Background(), tx, "idem_demo_businesses (org, slug, name, created_by, created_at)", rows)
		}); err != nil {
			t.Fatal(err)
		}
		c := listCase{op: "business.list", field: "businesses"}
		first, next := e.listPage(t, c, nil)
		if len(first) != listLimitDefault || next == nil {
			t.Fatalf("%d rows, next %v; want %d and a cursor", len(first), next, listLimitDefault)
		}
		rest, next := e.listPage(t, c, url.Values{"cursor": {*next}})
		if len(rest) != 1 || next != nil || !json.Valid(rest[0]) {
			t.Fatalf("second page: %s, next %v", rest, next)
		}
		var last Business
		_ = json.Unmarshal(rest[0], &last)
		if last.Slug != fmt.Sprintf("b-%03d", listLimitDefault) {
			t.Fatalf("last row %+v", last)
		}
	})
}

// TestLedgerPages: the gateway ledger route is bounded like the lists.
func TestLedgerPages(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		for i := range 5 {
			e.call(t, refund("", "ord_"+strconv.Itoa(30+i), `{"amount": 10}`, fmt.Sprintf("ledger-%d", i))).must(t, 200, "")
		}
		all := e.ledger(t, "demo-agent")
		if len(all) != 5 {
			t.Fatalf("%d effects", len(all))
		}
		var walked []gatewayEffect
		for q := "?limit=2"; ; {
			effects, next := e.ledgerPage(t, "demo-agent", q)
			if len(effects) > 2 {
				t.Fatalf("%d effects in a page of 2", len(effects))
			}
			walked = append(walked, effects...)
			if next == nil {
				break
			}
			q = "?limit=2&cursor=" + url.QueryEscape(*next)
		}
		if p, w := must(json.Marshal(walked)), must(json.Marshal(all)); string(p) != string(w) {
			t.Fatalf("paged %s, whole %s", p, w)
		}
		for _, q := range []string{"?limit=0", "?limit=1001", "?limit=2&limit=3", "?cursor=", "?cursor=WzFd", "?page=2"} {
			if w := e.ledgerGet(t, "demo-agent", q); w.Code != 400 || !json.Valid(w.Body.Bytes()) {
				t.Errorf("%s: %d %s", q, w.Code, w.Body)
			}
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestReadsUseIndexes runs every list (first and later pages), order.show,
// order.refund and the ledger, and reads the plan of each query they ran:
// on SQLite none scans a table or sorts (every read is a SEARCH of an
// index, in the order asked for); on PostgreSQL, with sequential scans,
// bitmap scans and sorts priced out, none still needs one (an index serves
// it, in order). TestReadsUseIndexes -v prints the plans.
func TestReadsUseIndexes(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		cases := listCases(t, e)
		for _, c := range cases {
			for i := range 3 {
				c.add(t, e, i)
			}
		}
		e.call(t, refund("", "ord_40", `{"amount": 10}`, "plan-1")).must(t, 200, "")
		type query struct {
			q    string
			args []any
		}
		var queries []query
		seen := map[string]bool{}
		e.app.db.onQuery = func(q string, args []any) {
			if !seen[q] {
				seen[q] = true
				queries = append(queries, query{q, args})
			}
		}
		for _, c := range cases {
			_, next := e.listPage(t, c, url.Values{"limit": {"2"}})
			if next == nil {
				t.Fatalf("%s: one page of 2 rows holds them all", c.op)
			}
			e.listPage(t, c, url.Values{"limit": {"2"}, "cursor": {*next}})
		}
		e.order(t, "ord_40")
		e.call(t, refund("", "ord_40", `{"amount": 10}`, "plan-2")).must(t, 200, "")
		_, next := e.ledgerPage(t, "demo-agent", "?limit=1")
		e.ledgerPage(t, "demo-agent", "?limit=1&cursor="+url.QueryEscape(*next))
		e.app.db.onQuery = nil

		ctx := context.Background()
		if e.app.db.dialect == "postgres" {
			// Plan with statistics, as a database in use has them.
			if err := e.app.db.InTx(ctx, func(tx *Tx) error { _, err := tx.Exec(ctx, "ANALYZE"); return err }); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range queries {
			var plan []string
			err := e.app.db.InTx(ctx, func(tx *Tx) error {
				plan = plan[:0]
				explain := "EXPLAIN QUERY PLAN "
				if e.app.db.dialect == "postgres" {
					explain = "EXPLAIN "
					for _, set := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
						if _, err := tx.Exec(ctx, "SET LOCAL "+set+" = off"); err != nil {
							return err
						}
					}
				}
				rows, err := tx.Query(ctx, explain+q.q, q.args...)
				if err != nil {
					return err
				}
				defer rows.Close()
				cols := 4 // SQLite: id, parent, notused, detail
				if e.app.db.dialect == "postgres" {
					cols = 1 // QUERY PLAN
				}
				for rows.Next() {
					cells := make([]any, cols)
					for i := range cells {
						cells[i] = new(any)
					}
					if err := rows.Scan(cells...); err != nil {
						return err
					}
					plan = append(plan, fmt.Sprint(*cells[len(cells)-1].(*any)))
				}
				return rows.Err()
			})
			if err != nil {
				t.Fatalf("%s: %v", q.q, err)
			}
			text := fmt.Sprint(plan)
			t.Logf("%s\n  %s", q.q, strings.Join(plan, "\n  "))
			bad := []string{"SCAN ", "TEMP B-TREE"}
			if e.app.db.dialect == "postgres" {
				bad = []string{"Seq Scan", "Sort", "Bitmap"}
			}
			for _, b := range bad {
				if strings.Contains(text, b) {
					t.Errorf("%s: plan has %q:\n  %s", q.q, b, strings.Join(plan, "\n  "))
				}
			}
		}
		if len(queries) < 20 {
			t.Fatalf("only %d queries recorded", len(queries))
		}
	})
}
