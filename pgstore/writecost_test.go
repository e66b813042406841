package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// TestFirstExecutionWriteCost counts the index entries a first execution
// adds to idem_records, per index, for a transactional one (one row
// inserted, final) and a two-phase one (inserted in flight, then
// completed), and logs the WAL bytes each wrote (issue 36 item 3;
// docs/store.md, "Indexes"). The entry counts are exact (pageinspect:
// the heap tuples each index's leaf pages point to) and bounded here, so
// that an index added to the hot path fails this test until
// docs/store.md justifies it and the bound moves; the WAL figure is the
// cluster's, so only a quiet cluster makes it the store's.
func TestFirstExecutionWriteCost(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := t.Context()
	admin := newPool(t, url)
	if _, err := admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pageinspect`); err != nil {
		t.Skipf("pageinspect (PostgreSQL's contrib) is not available: %v", err)
	}
	s, err := pgstore.Open(ctx, url, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, table := range idemTables {
		if _, err := admin.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`); err != nil {
			t.Fatal(err)
		}
	}
	const n = 400
	committed := func(context.Context, any) idem.TxOutcome {
		return idem.TxOutcome{Result: idem.CompleteParams{Status: http.StatusCreated, Body: []byte(`{"id":"ord_123","status":"created"}`),
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}}
	}
	for _, c := range []struct {
		kind string
		run  func(i int) error
		// want is the index entries one first execution adds, at most.
		want float64
	}{
		{"transactional", func(i int) error {
			p := reserveFor(fmt.Sprint("tx-", i), 24*time.Hour)
			p.Fingerprint = fmt.Sprint("fp-tx-", i)
			_, err := s.Transact(ctx, p, committed)
			return err
		}, 5},
		{"two-phase", func(i int) error {
			p := reserveFor(fmt.Sprint("2p-", i), 24*time.Hour)
			p.Fingerprint = fmt.Sprint("fp-2p-", i)
			res, err := s.Reserve(ctx, p)
			if err != nil {
				return err
			}
			_, err = s.Complete(ctx, idem.CompleteParams{Scope: scope, Key: res.Attempt.Key, FencingToken: res.Attempt.FencingToken,
				Status: 201, Body: []byte(`{"id":"ord_123","status":"created"}`),
				Finish: idem.FinishParams{Org: scope.Org, ExecutionID: p.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
					Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}})
			return err
		}, 11},
	} {
		before, wal0 := indexEntries(t, admin), walLSN(t, admin)
		for i := range n {
			if err := c.run(i); err != nil {
				t.Fatalf("%s %d: %v", c.kind, i, err)
			}
		}
		after, wal1 := indexEntries(t, admin), walLSN(t, admin)
		var total int64
		var per []string
		names := make([]string, 0, len(after))
		for name := range after {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			d := after[name] - before[name]
			total += d
			per = append(per, fmt.Sprintf("%s %.2f", strings.TrimPrefix(name, "idem_records_"), float64(d)/n))
		}
		entries := float64(total) / n
		t.Logf("%s first execution: %.2f index entries (%s), %.0f WAL bytes (the cluster's)", c.kind, entries, strings.Join(per, ", "), float64(wal1-wal0)/n)
		if entries > c.want {
			t.Errorf("a %s first execution adds %.2f index entries to idem_records, want at most %.0f", c.kind, entries, c.want)
		}
	}
}

// indexEntries counts, for each index of idem_records, the heap tuples its
// leaf pages point to (posting lists counted whole, high keys not).
func indexEntries(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT i.relname, COALESCE((
			SELECT sum(CASE WHEN it.tids IS NULL THEN 1 ELSE cardinality(it.tids) END)
			FROM generate_series(1, (pg_relation_size(i.oid) / current_setting('block_size')::int)::int - 1) p,
				bt_page_stats(i.relname::text, p) st,
				bt_page_items(i.relname::text, p) it
			WHERE st.type = 'l' AND NOT (st.btpo_next <> 0 AND it.itemoffset = 1)), 0)
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		WHERE x.indrelid = 'idem_records'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// walLSN is the cluster's WAL insert position, in bytes.
func walLSN(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	return int64(queryInt(t, pool, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8`))
}
