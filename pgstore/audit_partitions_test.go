package pgstore_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

const auditRetention = 7 * 24 * time.Hour

// partitionsOf lists the time partitions of table, oldest first.
func partitionsOf(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname <> $2 ORDER BY c.relname`, table, table+"_default")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// dayOf names the partition of table that holds rows of time at.
func dayOf(table string, at time.Time) string {
	return table + "_p" + at.Truncate(pgstore.AuditPartitionSpan).UTC().Format("20060102")
}

// wantAuditPartitions is the partitions of table Sweep should leave at now,
// from the first sweep at first on: every day up to the one after now's,
// except those whose day ended at or before the window's start.
func wantAuditPartitions(table string, first, now time.Time) []string {
	var out []string
	last := now.Truncate(pgstore.AuditPartitionSpan).Add(pgstore.PartitionsAhead * pgstore.AuditPartitionSpan)
	for start := first.Truncate(pgstore.AuditPartitionSpan); !start.After(last); start = start.Add(pgstore.AuditPartitionSpan) {
		if start.Add(pgstore.AuditPartitionSpan).After(now.Add(-auditRetention)) {
			out = append(out, dayOf(table, start))
		}
	}
	return out
}

func auditSweep(t *testing.T, s *pgstore.Store) idem.SweepResult {
	t.Helper()
	r, err := s.Sweep(t.Context(), idem.SweepParams{AuditRetention: auditRetention})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// where returns the partitions holding execution id and its events.
func where(t *testing.T, pool *pgxpool.Pool, id string) (execution []string, events []string) {
	t.Helper()
	for _, q := range []struct {
		sql  string
		dest *[]string
	}{
		{`SELECT tableoid::regclass::text FROM idem_executions WHERE org = 'acme' AND id = $1`, &execution},
		{`SELECT DISTINCT tableoid::regclass::text FROM idem_audit_events WHERE org = 'acme' AND execution_id = $1 ORDER BY 1`, &events},
	} {
		rows, err := pool.Query(t.Context(), q.sql, id)
		if err != nil {
			t.Fatal(err)
		}
		if *q.dest, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
	}
	return execution, events
}

// Twelve days of six-hourly executions and sweeps under a fake clock: the
// partitions of executions and events are made ahead of the clock, rows
// land in the partition of their time, and a partition is dropped, rows
// and all, once its day ended before the window, never while an execution
// within the window is in it.
func TestAuditPartitionsFollowTheClock(t *testing.T) {
	url := pgtest.NewDatabase(t)
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)

	r := auditSweep(t, s)
	for _, table := range []string{"idem_executions", "idem_audit_events"} {
		if got, want := partitionsOf(t, pool, table), wantAuditPartitions(table, start, start); !slices.Equal(got, want) {
			t.Fatalf("first sweep: %s partitions %v, want %v", table, got, want)
		}
	}
	if r.AuditPartitionsCreated != 4 {
		t.Fatalf("first sweep created %d audit partitions, want 4 (today and tomorrow, two tables)", r.AuditPartitionsCreated)
	}
	created, dropped := r.AuditPartitionsCreated, 0
	started := map[string]time.Time{}
	for step := 1; step <= 48; step++ {
		clock.Advance(6 * time.Hour)
		now := clock.Now()
		x, err := s.StartExecution(t.Context(), idem.StartParams{ExecutionID: fmt.Sprint("exe_", step), Scope: scope, Operation: "op", Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishExecution(t.Context(), idem.FinishParams{Org: scope.Org, ExecutionID: x.ID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
			Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
			t.Fatal(err)
		}
		started[x.ID] = now
		if xs, evs := where(t, pool, x.ID); !slices.Equal(xs, []string{dayOf("idem_executions", now)}) || !slices.Equal(evs, []string{dayOf("idem_audit_events", now)}) {
			t.Fatalf("step %d: %s stored in %v, its events in %v; want the partitions of %s", step, x.ID, xs, evs, now)
		}
		r := auditSweep(t, s)
		created += r.AuditPartitionsCreated
		dropped += r.AuditPartitionsDropped
		if r.ExecutionsRemoved != 0 || r.EventsRemoved != 0 {
			t.Fatalf("step %d: %+v: rows deleted one by one, want none (all are in their partitions)", step, r)
		}
		n := 0
		for _, table := range []string{"idem_executions", "idem_audit_events"} {
			want := wantAuditPartitions(table, start, now)
			if got := partitionsOf(t, pool, table); !slices.Equal(got, want) {
				t.Fatalf("step %d (%s): %s partitions %v, want %v", step, now.Format(time.DateTime), table, got, want)
			}
			n += len(want)
		}
		if created-dropped != n {
			t.Fatalf("step %d: sweeps counted %d created and %d dropped, but %d exist", step, created, dropped, n)
		}
		for id, at := range started {
			_, err := s.GetExecution(t.Context(), idem.GetExecutionParams{Org: scope.Org, ID: id})
			xs, evs := where(t, pool, id)
			switch {
			case at.After(now.Add(-auditRetention)):
				if err != nil || len(xs) != 1 || len(evs) != 1 {
					t.Fatalf("step %d: %s within the window: %v, in %v, events in %v", step, id, err, xs, evs)
				}
			case at.Add(pgstore.AuditPartitionSpan).Before(now.Add(-auditRetention)):
				if !errors.Is(err, idem.ErrNotFound) || len(xs) != 0 || len(evs) != 0 {
					t.Fatalf("step %d: %s a day past the window: %v, in %v, events in %v; want all gone", step, id, err, xs, evs)
				}
			}
		}
	}
	if dropped < 2*4 {
		t.Fatalf("%d audit partitions dropped over 12 days, want at least 8", dropped)
	}
}

// Executions and events whose time has no partition land in the DEFAULT
// partitions: those written before the first sweep move into their
// partition when it is made; those of a range left without one (an
// instance whose clock ran ahead) are deleted row by row once past the
// window, at most BatchSize per round.
func TestAuditDefaultPartitions(t *testing.T) {
	url := pgtest.NewDatabase(t)
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)
	early, err := s.StartExecution(t.Context(), idem.StartParams{ExecutionID: "exe_early", Scope: scope, Operation: "op", Fingerprint: "fp"})
	if err != nil {
		t.Fatal(err)
	}
	if xs, evs := where(t, pool, early.ID); !slices.Equal(xs, []string{"idem_executions_default"}) || !slices.Equal(evs, []string{"idem_audit_events_default"}) {
		t.Fatalf("before any sweep: stored in %v, events in %v", xs, evs)
	}
	// Three days ahead, where no partition is made: 30 executions with two
	// events each.
	ahead := start.Add(3 * 24 * time.Hour)
	if _, err := pool.Exec(t.Context(), `
		WITH x AS (INSERT INTO idem_executions (org, id, principal, operation, fingerprint, attempts, outcome, started_at)
			SELECT 'acme', 'exe_ahead_' || i, 'agent', 'op', 'fp', 1, 'succeeded', $1 FROM generate_series(1, 30) i RETURNING id)
		INSERT INTO idem_audit_events (org, execution_id, type, at) SELECT 'acme', id, t, $1 FROM x, unnest(ARRAY['execution.started', 'execution.succeeded']) t`,
		ahead); err != nil {
		t.Fatal(err)
	}

	r := auditSweep(t, s)
	if r.ExecutionsRemoved != 0 || r.EventsRemoved != 0 {
		t.Fatalf("first sweep removed %+v, want nothing", r)
	}
	if xs, evs := where(t, pool, early.ID); !slices.Equal(xs, []string{dayOf("idem_executions", start)}) || !slices.Equal(evs, []string{dayOf("idem_audit_events", start)}) {
		t.Fatalf("after the first sweep: stored in %v, events in %v; want moved into their partitions", xs, evs)
	}
	if got, err := s.GetExecution(t.Context(), idem.GetExecutionParams{Org: scope.Org, ID: early.ID}); err != nil || len(got.Events) != 1 {
		t.Fatalf("early after the move = %+v, %v", got, err)
	}
	// Past the window of the rows ahead, they go by row, ten per round.
	clock.Advance(3*24*time.Hour + auditRetention)
	var executions, events, rounds int
	for {
		r, err := s.Sweep(t.Context(), idem.SweepParams{BatchSize: 10, AuditRetention: auditRetention})
		if err != nil {
			t.Fatal(err)
		}
		if r.ExecutionsRemoved > 10 || r.EventsRemoved > 10 {
			t.Fatalf("round %d removed %+v, want at most 10 of each", rounds, r)
		}
		executions, events, rounds = executions+r.ExecutionsRemoved, events+r.EventsRemoved, rounds+1
		if r.Done(10) {
			break
		}
	}
	if executions != 30 || events != 60 || rounds != 7 {
		t.Fatalf("removed %d executions and %d events in %d rounds, want 30 and 60 in 7", executions, events, rounds)
	}
	if left := queryInt(t, pool, `SELECT (SELECT count(*) FROM idem_executions) + (SELECT count(*) FROM idem_audit_events)`); left != 0 {
		t.Fatalf("%d rows left past the window", left)
	}
}

// Lookups of an execution by (org, id), and of its events, use an index in
// every partition: they cannot be pruned by time, so each partition's
// index is probed, and none is scanned whole.
func TestAuditLookupsUseIndexes(t *testing.T) {
	url := pgtest.NewDatabase(t)
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)
	auditSweep(t, s)
	clock.Advance(24 * time.Hour)
	auditSweep(t, s) // three days of partitions, and DEFAULT for the day before, all filled
	if _, err := pool.Exec(t.Context(), `
		WITH x AS (INSERT INTO idem_executions (org, id, principal, operation, fingerprint, attempts, outcome, started_at)
			SELECT 'acme', 'exe_' || i, 'agent', 'op', 'fp' || (i % 50), 1, 'succeeded', $1::timestamptz + i * interval '1.6 second'
			FROM generate_series(1, 150000) i RETURNING id, started_at)
		INSERT INTO idem_audit_events (org, execution_id, type, at) SELECT 'acme', id, t, started_at
		FROM x, unnest(ARRAY['execution.started', 'execution.succeeded']) t`, start.Add(-12*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `ANALYZE idem_executions, idem_audit_events`); err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]string{
		"get execution":     `SELECT * FROM idem_executions WHERE org = 'acme' AND id = 'exe_77'`,
		"finish execution":  `UPDATE idem_executions SET outcome = 'failed' WHERE org = 'acme' AND id = 'exe_77'`,
		"event's execution": `SELECT EXISTS (SELECT 1 FROM idem_executions WHERE org = 'acme' AND id = 'exe_77')`,
		"events":            `SELECT * FROM idem_audit_events WHERE org = 'acme' AND execution_id = 'exe_77' ORDER BY id`,
		"reinvocation of": `SELECT id FROM idem_executions WHERE org = 'acme' AND principal = 'agent' AND operation = 'op' AND fingerprint = 'fp7'
			ORDER BY started_at DESC, seq DESC LIMIT 1`,
	} {
		rows, err := pool.Query(t.Context(), "EXPLAIN "+q)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		probes := strings.Count(plan, "Index Scan") + strings.Count(plan, "Index Only Scan")
		if strings.Contains(plan, "Seq Scan") || probes < 4 {
			t.Errorf("%s: plan scans a partition whole, or probes fewer than the 4 partitions:\n%s", name, plan)
		}
		t.Logf("%s:\n%s", name, plan)
	}
}

// Migration 005 moves the executions and events of an existing deployment
// into the partitioned tables: they stay readable in order, each lands in
// the partition of its day, and the identity sequences carry on.
func TestAuditMigrationKeepsExistingRows(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := newPool(t, url)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE idem_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for v, name := range []string{"001_initial", "002_partitioned_attempts", "003_executions_recent", "004_watched_attempts"} {
		sql, err := os.ReadFile("migrations/" + name + ".up.sql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(sql)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO idem_schema_migrations VALUES ($1, $2, '2026-11-29 00:00:00Z')`, v+1, name[4:]); err != nil {
			t.Fatal(err)
		}
	}
	// Executions written by the store onto the 004 schema, over three days.
	clock := fakeclock.New(time.Date(2026, 11, 28, 22, 15, 0, 0, time.UTC))
	old, err := pgstore.New(ctx, pool, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var before []idem.Execution
	for i := range 5 {
		clock.Advance(11 * time.Hour)
		x, err := old.StartExecution(ctx, idem.StartParams{ExecutionID: fmt.Sprint("exe_old_", i), Scope: scope, Operation: "op", Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := old.FinishExecution(ctx, idem.FinishParams{Org: scope.Org, ExecutionID: x.ID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
				Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		if x, err = old.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: x.ID}); err != nil {
			t.Fatal(err)
		}
		before = append(before, x)
	}

	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate over existing rows: %v", err)
	}
	for _, table := range []string{"idem_executions", "idem_audit_events"} {
		var kind string
		if err := pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, table).Scan(&kind); err != nil || kind != "p" {
			t.Fatalf("after 005: %s relkind %q, %v; want partitioned", table, kind, err)
		}
		var want []string
		for _, x := range before {
			if d := dayOf(table, x.StartedAt); !slices.Contains(want, d) {
				want = append(want, d)
			}
		}
		if got := partitionsOf(t, pool, table); !slices.Equal(got, want) {
			t.Fatalf("%s partitions made for the existing rows: %v, want %v", table, got, want)
		}
	}
	s := openStore(t, url, clock)
	for _, b := range before {
		got, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: b.ID})
		if err != nil || fmt.Sprintf("%+v %v %v", got.Events, got.Outcome, got.StartedAt) != fmt.Sprintf("%+v %v %v", b.Events, b.Outcome, b.StartedAt) {
			t.Fatalf("%s after the migration = %+v, %v; want %+v", b.ID, got, err, b)
		}
		if xs, _ := where(t, pool, b.ID); !slices.Equal(xs, []string{dayOf("idem_executions", b.StartedAt)}) {
			t.Fatalf("%s stored in %v", b.ID, xs)
		}
	}
	// The sequences carried on: an execution started at the same instant
	// as the last one sorts after it, and a new event after the old ones.
	last := before[len(before)-1]
	x, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: "exe_new", Scope: scope, Operation: "op", Fingerprint: "fp"})
	if err != nil || x.ReinvocationOf == nil || *x.ReinvocationOf != last.ID {
		t.Fatalf("new execution after the migration = %+v, %v; want a re-invocation of %s", x, err, last.ID)
	}
	y, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: "exe_newer", Scope: scope, Operation: "op", Fingerprint: "fp"})
	if err != nil || y.ReinvocationOf == nil || *y.ReinvocationOf != x.ID {
		t.Fatalf("second new execution at the same instant = %+v, %v; want a re-invocation of %s", y, err, x.ID)
	}
	if err := s.FinishExecution(ctx, idem.FinishParams{Org: scope.Org, ExecutionID: last.ID, Outcome: idem.OutcomeFailed, Code: idem.CodeExecutionFailed, Attempts: 1,
		Events: []idem.AuditEvent{{Type: idem.EventFailed}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: last.ID})
	if err != nil || len(got.Events) != len(last.Events)+1 || got.Events[len(got.Events)-1].Type != idem.EventFailed {
		t.Fatalf("%s finished after the migration = %+v, %v; want its new event last", last.ID, got, err)
	}
}

// A first execution (a keyed call: its attempt record, its execution and
// its events) leaves 0 bytes behind once attempt and audit retention have
// passed: the database's relations are then exactly the size of a fresh
// database's at the same time.
func TestFirstExecutionLeavesNoBytes(t *testing.T) {
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	end := start.Add(auditRetention + 2*24*time.Hour)
	size := func(pool *pgxpool.Pool) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(t.Context(), `SELECT sum(pg_total_relation_size(relid)) FROM (
				SELECT relid FROM pg_partition_tree('idem_attempts') UNION ALL
				SELECT relid FROM pg_partition_tree('idem_executions') UNION ALL
				SELECT relid FROM pg_partition_tree('idem_audit_events')) r`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	url := pgtest.NewDatabase(t)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)
	auditSweep(t, s)
	empty := size(pool)
	const n = 2000
	for i := range n {
		res, err := s.Reserve(t.Context(), reserveFor(fmt.Sprint("key-", i), 24*time.Hour))
		if err != nil || !res.Reserved {
			t.Fatalf("Reserve: %+v, %v", res, err)
		}
		a := res.Attempt
		if _, err := s.Complete(t.Context(), idem.CompleteParams{Scope: scope, Key: a.Key, FencingToken: a.FencingToken, Status: 201,
			Body: []byte(`{"id":"ord_123","status":"created"}`),
			Finish: idem.FinishParams{Org: scope.Org, ExecutionID: a.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
				Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1, DurationMs: 3}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(t.Context(), `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	retained := size(pool)
	clock.Advance(end.Sub(clock.Now()))
	auditSweep(t, s)
	after := size(pool)

	freshURL := pgtest.NewDatabase(t)
	fresh := openStore(t, freshURL, fakeclock.New(end))
	auditSweep(t, fresh)
	baseline := size(newPool(t, freshURL))
	t.Logf("relations: %d bytes empty, %d with %d first executions (%.0f bytes each while retained), %d after retention, %d in a fresh database",
		empty, retained, n, float64(retained-empty)/n, after, baseline)
	if after != baseline {
		t.Fatalf("after retention the relations take %d bytes, a fresh database's %d: %d bytes left behind", after, baseline, after-baseline)
	}
	if rows := queryInt(t, pool, `SELECT (SELECT count(*) FROM idem_attempts) + (SELECT count(*) FROM idem_executions) +
		(SELECT count(*) FROM idem_audit_events)`); rows != 0 {
		t.Fatalf("%d rows left after retention", rows)
	}
}
