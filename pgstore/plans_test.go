package pgstore_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/storetest"
)

// idemTables are the tables the store reads and writes.
var idemTables = []string{"idem_records", "idem_audit_events", "idem_approvals"}

// On a fresh store, never analyzed and with autovacuum off (so that no
// ANALYZE ever comes), thousands of executions of every kind (two-phase
// first executions and replays, transactional ones keyed and not,
// approvals, batched completions) read idem's tables only through their
// indexes: no sequential scan, and every hot statement's generic plan,
// the one the store runs (plan_cache_mode = force_generic_plan), reads
// no table by a sequential scan. (Issue 36 item 1: on PostgreSQL an
// unanalyzed table is planned as 10 pages, on which a sequential scan
// looks cheaper than an index, and a connection keeps the generic plan it
// made then.)
func TestFreshStorePlansUseIndexes(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := t.Context()
	setup, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgstore.Migrate(ctx, setup); err != nil {
		t.Fatal(err)
	}
	for _, table := range idemTables {
		if _, err := setup.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`); err != nil {
			t.Fatal(err)
		}
	}
	setup.Close()
	// The statements' plans are read on connections set up as the
	// store's are.
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pgstore.ConfigurePool(cfg)
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ended(t, admin)
	before := seqScans(t, admin)
	// The plans the store's connections make first, on empty tables.
	checkPlans(t, admin, "empty")

	clock := fakeclock.New(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	s, err := pgstore.Open(ctx, url, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	// A batch of completions first, as group commit makes under load
	// (complete_set.sql): on an empty table.
	var batch []idem.CompleteParams
	for i := range 2 {
		res, err := s.Reserve(ctx, reserveFor(fmt.Sprint("batch-", i), time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, idem.CompleteParams{Scope: scope, Key: res.Attempt.Key, FencingToken: res.Attempt.FencingToken,
			Status: 200, Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}})
	}
	if _, errs, err := pgstore.CompleteSet(ctx, s, batch); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("CompleteSet: %v %v", errs, err)
	}
	const workers, perWorker = 8, 250
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if err := storetest.Workload(ctx, s, scope, fmt.Sprint("w", w), perWorker); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s.Close()
	ended(t, admin)
	if n := queryInt(t, admin, `SELECT count(*) FROM pg_class WHERE relname = ANY($1) AND reltuples >= 0`, idemTables); n != 0 {
		t.Fatalf("%d of idem's tables were analyzed meanwhile: the test proves nothing", n)
	}
	after := seqScans(t, admin)
	for _, table := range idemTables {
		if d := after[table] - before[table]; d != 0 {
			t.Errorf("%s: %d sequential scans during %d executions of each kind on a fresh store", table, d, workers*perWorker)
		}
	}
	checkPlans(t, admin, fmt.Sprint("after ", workers*perWorker, " rounds"))
	if _, err := admin.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	checkPlans(t, admin, "analyzed")
}

// orgOnly matches an index probe by the org alone: every index of idem's
// tables leads with the org, so such a probe reads the org's every row.
var orgOnly = regexp.MustCompile(`(?m)Index Cond: \(org = [$\w.]+\)$`)

// checkPlans fails the test for each hot statement whose generic plan
// reads one of idem's tables by a sequential scan, or probes an index by
// the org alone and filters the rest: on an empty table every index costs
// the same to the planner, and a plan made then that took the list's
// index (idem_records_recent) for the newest execution of an intent
// ("reinvocation_of") read, at each first execution, every earlier
// record of its org (issue 36).
func checkPlans(t *testing.T, pool *pgxpool.Pool, when string) {
	t.Helper()
	for _, name := range sortedKeys(pgstore.HotStatements) {
		plan := genericPlan(t, pool, pgstore.HotStatements[name])
		if strings.Contains(plan, "Seq Scan on idem_") {
			t.Errorf("%s, %s: the generic plan scans a table:\n%s", name, when, plan)
		}
		if orgOnly.MatchString(plan) {
			t.Errorf("%s, %s: the generic plan walks the org's records by an index it filters:\n%s", name, when, plan)
		}
	}
}

// ended waits until pool's connection is the database's only one: a
// backend's counters reach pg_stat_user_tables when it exits, before it
// leaves pg_stat_activity.
func ended(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	waitUntil(t, "the other connections ended", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`) == 0
	})
}

// seqScans reads the sequential scans of idem's tables so far.
func seqScans(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT relname, seq_scan FROM pg_stat_user_tables WHERE relname = ANY($1)`, idemTables)
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

// genericPlan is the plan PostgreSQL makes for q with its parameters
// unknown, on a connection of pool, which runs it on the generic plan
// (plan_cache_mode = force_generic_plan; EXPLAIN (GENERIC_PLAN) is
// PostgreSQL 16's).
func genericPlan(t *testing.T, pool *pgxpool.Pool, q string) string {
	t.Helper()
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ctx := t.Context()
	defer conn.Exec(context.WithoutCancel(ctx), `DEALLOCATE q`)
	if _, err := conn.Exec(ctx, `PREPARE q AS `+q); err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	var params int
	if err := conn.QueryRow(ctx, `SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = 'q'`).Scan(&params); err != nil {
		t.Fatal(err)
	}
	args := ""
	if params > 0 {
		args = "(" + strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ") + ")"
	}
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE q`+args)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
