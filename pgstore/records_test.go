package pgstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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

var scope = idem.Scope{Org: "acme", Principal: "agent"}

const auditRetention = 7 * 24 * time.Hour

func reserveFor(key string, retention time.Duration) idem.ReserveParams {
	return idem.ReserveParams{
		StartParams: idem.StartParams{ExecutionID: fmt.Sprintf("exe_%s_%d", key, time.Now().UnixNano()), Scope: scope, Operation: "op", Fingerprint: "fp"},
		Key:         key, Lease: time.Minute, Retention: retention,
	}
}

// queryInt runs a query for one integer on pool, failing the test on an
// error.
func queryInt(t testing.TB, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func openStore(t *testing.T, url string, clock idem.Clock) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), url, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func auditSweep(t *testing.T, s *pgstore.Store) idem.SweepResult {
	t.Helper()
	r, err := s.Sweep(t.Context(), idem.SweepParams{AuditRetention: auditRetention})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// firstExecutions runs n keyed first executions (Reserve and Complete with
// a 35-byte body and one final event) with keys prefix-0, prefix-1, ….
func firstExecutions(t *testing.T, s *pgstore.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		res, err := s.Reserve(t.Context(), reserveFor(fmt.Sprint(prefix, "-", i), 24*time.Hour))
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
}

// A first execution (its record, which is its execution, and its events)
// leaves no row behind once attempt and audit retention have passed, and
// the space it took is reused by the next ones: storage is bounded by
// what retention keeps, not by how many executions ever ran. (Relations
// do not shrink: PostgreSQL reuses the pages VACUUM frees; a B-tree page
// it deletes is reusable after the next VACUUM, which autovacuum runs and
// this test runs twice.)
func TestFirstExecutionLeavesNoBytes(t *testing.T) {
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	size := func(pool *pgxpool.Pool) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(t.Context(), `SELECT pg_total_relation_size('idem_records') + pg_total_relation_size('idem_audit_events')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	vacuum := func(pool *pgxpool.Pool) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `VACUUM idem_records, idem_audit_events`); err != nil {
			t.Fatal(err)
		}
	}

	url := pgtest.NewDatabase(t)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)
	empty := size(pool)
	const n = 1000
	sizes := make([]int64, 3)
	for wave := range sizes {
		firstExecutions(t, s, fmt.Sprint("wave", wave), n)
		vacuum(pool)
		sizes[wave] = size(pool)
		clock.Advance(auditRetention + 2*24*time.Hour)
		for {
			r := auditSweep(t, s)
			if r.Done(500) {
				break
			}
		}
		if rows := queryInt(t, pool, `SELECT (SELECT count(*) FROM idem_records) + (SELECT count(*) FROM idem_audit_events)`); rows != 0 {
			t.Fatalf("wave %d: %d rows left after retention", wave, rows)
		}
		vacuum(pool)
		vacuum(pool)
	}
	t.Logf("relations: %d bytes empty; with %d first executions retained: %v (%.0f bytes each)",
		empty, n, sizes, float64(sizes[0]-empty)/n)
	// Without reuse the third wave would take three times the first; the
	// pages B-tree deletion frees are reusable a VACUUM later, so the
	// second wave grows the indexes a little, and then they stay. Measured
	// 1.2× alone and up to 1.8× beside make test's other packages (whose
	// load delays what VACUUM may recycle): 2.5× still tells reuse from
	// none.
	if sizes[2] > sizes[0]*5/2 {
		t.Fatalf("the third wave of %d executions takes %d bytes, the first %d: the space retention freed is not reused", n, sizes[2], sizes[0])
	}
}

// Every lookup of the hot path is one probe of one index of an
// unpartitioned table, on the generic plan the store runs
// (plan_cache_mode = force_generic_plan), however many records there are.
func TestHotLookupsUseOneIndex(t *testing.T) {
	url := pgtest.NewDatabase(t)
	clock := fakeclock.New(time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC))
	openStore(t, url, clock)
	pool := newPool(t, url)
	if _, err := pool.Exec(t.Context(), `
		INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state, fencing_token,
			lease_expires_at, expires_at, attempts, outcome, started_at, events)
		SELECT 'acme', 'exe_' || i, 'agent', 'op', 'fp' || (i % 50), 'key-' || i, i % 3 <> 0, 'completed', i,
			$1::timestamptz, $1::timestamptz + interval '1 day', 1, 'succeeded', $1::timestamptz + i * interval '1.6 second', '[]'
		FROM generate_series(1, 150000) i`, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `ANALYZE idem_records`); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ q, index string }{
		"get attempt": {`SELECT * FROM idem_records WHERE org = $1 AND principal = $2 AND key = $3 AND held`, "idem_records_key"},
		"complete": {`UPDATE idem_records SET state = 'completed' WHERE org = $1 AND principal = $2 AND key = $3 AND held
			AND fencing_token = 7 AND state = 'in_flight'`, "idem_records_key"},
		"get execution": {`SELECT * FROM idem_records WHERE org = $1 AND id = $2 AND principal <> $3`, "idem_records_pkey"},
		"reinvocation of": {`SELECT id FROM idem_records WHERE org = $1 AND principal = $2 AND operation = 'op' AND fingerprint = $3
			ORDER BY started_at DESC, seq DESC LIMIT 1`, "idem_records_intent"},
	} {
		conn, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		err = func() error {
			defer conn.Release()
			for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `PREPARE q(text, text, text) AS ` + c.q} {
				if _, err := conn.Exec(t.Context(), q); err != nil {
					return err
				}
			}
			rows, err := conn.Query(t.Context(), `EXPLAIN EXECUTE q('acme', 'agent', 'key-77')`)
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			_, _ = conn.Exec(t.Context(), `DEALLOCATE q; RESET plan_cache_mode`)
			return err
		}()
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if strings.Contains(text, "Seq Scan") || strings.Count(text, " using ") != 1 || !strings.Contains(text, " using "+c.index+" ") {
			t.Errorf("%s: want one probe of %s, plan:\n%s", name, c.index, text)
		}
		t.Logf("%s:\n%s", name, text)
	}
}

// Migration 006 moves the attempt records, executions and events of an
// existing deployment into idem_records: every record answers as before
// (a completed one replays, an in-flight one stays in flight under its
// fence, an indeterminate one stays so), executions keep their events in
// order, a key's older forgotten row no longer holds it, and an attempt
// record whose execution retention removed keeps its key.
func TestRecordsMigrationKeepsExistingRows(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := newPool(t, url)
	ctx := t.Context()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	exec(`CREATE TABLE idem_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`)
	for v, name := range []string{"001_initial", "002_partitioned_attempts", "003_executions_recent", "004_watched_attempts", "005_partitioned_executions"} {
		sql, err := os.ReadFile("migrations/" + name + ".up.sql")
		if err != nil {
			t.Fatal(err)
		}
		exec(string(sql))
		exec(`INSERT INTO idem_schema_migrations VALUES ($1, $2, '2026-11-29 00:00:00Z')`, v+1, name[4:])
	}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	// What pgstore at migration 005 wrote, as it wrote it.
	exec(`INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key, attempts, outcome, code, reinvocation_of, started_at, finished_at) VALUES
		('acme', 'exe_done', 'agent', 'op', 'fp1', 'k-done', 1, 'succeeded', NULL, NULL, $1::timestamptz - interval '2 hours', $1::timestamptz - interval '2 hours' + interval '3 ms'),
		('acme', 'exe_fly', 'agent', 'op', 'fp2', 'k-fly', 1, 'running', NULL, NULL, $1::timestamptz - interval '10 seconds', NULL),
		('acme', 'exe_lost', 'agent', 'op', 'fp3', 'k-lost', 1, 'running', NULL, NULL, $1::timestamptz - interval '1 hour', NULL),
		('acme', 'exe_old', 'agent', 'op', 'fp4', 'k-reused', 1, 'succeeded', NULL, NULL, $1::timestamptz - interval '30 hours', $1::timestamptz - interval '30 hours'),
		('acme', 'exe_new', 'agent', 'op', 'fp4', 'k-reused', 1, 'failed', 'EXECUTION_FAILED', 'exe_old', $1::timestamptz - interval '1 hour', $1::timestamptz - interval '1 hour'),
		('acme', 'exe_unkeyed', 'agent', 'read', 'fp5', NULL, 2, 'succeeded', NULL, NULL, $1::timestamptz - interval '5 minutes', $1::timestamptz - interval '5 minutes')`, now)
	exec(`INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state, execution_id, fencing_token, lease_expires_at,
			status, headers, body, created_at, completed_at, expires_at) VALUES
		('acme', 'agent', 'k-done', 'op', 'fp1', 'completed', 'exe_done', 11, $1::timestamptz, 201, '{"Content-Type":["application/json"]}', '{"id":"b_1"}',
			$1::timestamptz - interval '2 hours', $1::timestamptz - interval '2 hours', $1::timestamptz + interval '22 hours'),
		('acme', 'agent', 'k-fly', 'op', 'fp2', 'in_flight', 'exe_fly', 12, $1::timestamptz + interval '50 seconds',
			NULL, NULL, NULL, $1::timestamptz - interval '10 seconds', NULL, $1::timestamptz + interval '1 day'),
		('acme', 'agent', 'k-lost', 'op', 'fp3', 'indeterminate', 'exe_lost', 13, $1::timestamptz - interval '59 minutes',
			NULL, NULL, NULL, $1::timestamptz - interval '1 hour', NULL, $1::timestamptz + interval '23 hours'),
		('acme', 'agent', 'k-reused', 'op', 'fp4', 'completed', 'exe_old', 14, $1::timestamptz - interval '30 hours', 200, '{}', '{}',
			$1::timestamptz - interval '30 hours', $1::timestamptz - interval '30 hours', $1::timestamptz - interval '6 hours'),
		('acme', 'agent', 'k-reused', 'op', 'fp4', 'completed', 'exe_new', 15, $1::timestamptz - interval '1 hour', 422, '{}', '{"e":1}',
			$1::timestamptz - interval '1 hour', $1::timestamptz - interval '1 hour', $1::timestamptz + interval '23 hours'),
		('acme', 'agent', 'k-orphan', 'op', 'fp6', 'completed', 'exe_gone', 16, $1::timestamptz - interval '3 hours', 200, '{}', '{"o":1}',
			$1::timestamptz - interval '3 hours', $1::timestamptz - interval '3 hours', $1::timestamptz + interval '21 hours')`, now)
	exec(`INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data) VALUES
		('acme', 'exe_done', 'execution.started', $1::timestamptz - interval '2 hours', 1, NULL, NULL, NULL, NULL, NULL),
		('acme', 'exe_done', 'execution.succeeded', $1::timestamptz - interval '2 hours' + interval '3 ms', NULL, NULL, NULL, 1, 3, NULL),
		('acme', 'exe_done', 'execution.replayed', $1::timestamptz - interval '1 hour', NULL, NULL, NULL, NULL, NULL, '{"status":"201"}'),
		('acme', 'exe_unkeyed', 'execution.started', $1::timestamptz - interval '5 minutes', 1, NULL, NULL, NULL, NULL, NULL),
		('acme', 'exe_unkeyed', 'execution.retried', $1::timestamptz - interval '5 minutes' + interval '1.000001 seconds', 2, NULL, 'TIMEOUT', NULL, NULL, NULL),
		('acme', 'exe_unkeyed', 'execution.succeeded', $1::timestamptz - interval '5 minutes' + interval '2 seconds', NULL, NULL, NULL, 2, 2000, NULL),
		('acme', 'exe_vanished', 'execution.started', $1::timestamptz, 1, NULL, NULL, NULL, NULL, NULL)`, now)

	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate over existing rows: %v", err)
	}
	s := openStore(t, url, fakeclock.New(now))
	get := func(key string) idem.Attempt {
		t.Helper()
		a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: key})
		if err != nil {
			t.Fatalf("GetAttempt(%s) after the migration: %v", key, err)
		}
		return a
	}
	if a := get("k-done"); a.State != idem.AttemptCompleted || a.Status != 201 || string(a.Body) != `{"id":"b_1"}` ||
		a.ExecutionID != "exe_done" || a.Headers.Get("Content-Type") != "application/json" || !a.CreatedAt.Equal(now.Add(-2*time.Hour)) {
		t.Errorf("k-done = %+v", a)
	}
	fly := get("k-fly")
	if fly.State != idem.AttemptInFlight || fly.FencingToken != 12 {
		t.Errorf("k-fly = %+v", fly)
	}
	if a := get("k-lost"); a.State != idem.AttemptIndeterminate {
		t.Errorf("k-lost = %+v", a)
	}
	if a := get("k-reused"); a.ExecutionID != "exe_new" || a.Status != 422 {
		t.Errorf("k-reused = %+v, want the newer record", a)
	}
	if a := get("k-orphan"); a.ExecutionID != "exe_gone" || string(a.Body) != `{"o":1}` {
		t.Errorf("k-orphan = %+v", a)
	}
	// The in-flight record completes under its fence, as it would have.
	if _, err := s.Complete(ctx, idem.CompleteParams{Scope: scope, Key: "k-fly", FencingToken: 12, Status: 200, Body: []byte(`{}`),
		Finish: idem.FinishParams{Org: scope.Org, ExecutionID: "exe_fly", Outcome: idem.OutcomeSucceeded, Attempts: 1,
			Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}); err != nil {
		t.Fatalf("Complete of the migrated in-flight record: %v", err)
	}
	x, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: "exe_unkeyed"})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range x.Events {
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, ","); got != "execution.started,execution.retried,execution.succeeded" ||
		x.Events[1].PreviousErrorCode != idem.CodeTimeout || x.Events[1].Attempt != 2 ||
		!x.Events[1].At.Equal(now.Add(-5*time.Minute+time.Second+time.Microsecond)) || x.Events[2].DurationMs != 2000 || x.Attempts != 2 {
		t.Errorf("exe_unkeyed after the migration = %+v", x)
	}
	done, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: "exe_done"})
	if err != nil || len(done.Events) != 3 || done.Events[2].Data["status"] != "201" || done.Key != "k-done" {
		t.Errorf("exe_done after the migration = %+v, %v", done, err)
	}
	if _, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: "exe_vanished"}); err == nil {
		t.Error("events without an execution became one")
	}
	list, err := s.ListExecutions(ctx, idem.ListExecutionsParams{Org: scope.Org, Limit: 10})
	if err != nil || len(list) != 7 || list[0].ID != "exe_fly" {
		t.Errorf("ListExecutions after the migration = %d executions, first %+v, %v", len(list), list, err)
	}
	// A new execution of a migrated intent links to it.
	next, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: "exe_next", Scope: scope, Operation: "op", Fingerprint: "fp4"})
	if err != nil || next.ReinvocationOf == nil || *next.ReinvocationOf != "exe_new" {
		t.Errorf("new execution of a migrated intent = %+v, %v; want a re-invocation of exe_new", next, err)
	}
	// A forgotten key is reserved afresh; a live one is not.
	if res, err := s.Reserve(ctx, idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: "exe_again", Scope: scope, Operation: "op", Fingerprint: "fp1"},
		Key: "k-done", Lease: time.Minute, Retention: 24 * time.Hour}); err != nil || res.Reserved || res.Attempt.ExecutionID != "exe_done" {
		t.Errorf("Reserve of a migrated live key = %+v, %v; want its record", res, err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM idem_records WHERE held`); n != 5 {
		t.Errorf("%d records hold a key, want 5", n)
	}
}

// Migration 007 adds each record's fingerprint version: a record written
// at migration 006 (as the release before wrote it) reads with version 0
// and keeps everything else, and a reservation made now stores the
// version it is given (issue 33 item 5).
func TestFingerprintVersionMigrationKeepsExistingRows(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := newPool(t, url)
	ctx := t.Context()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	exec(`CREATE TABLE idem_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`)
	for v, name := range []string{"001_initial", "002_partitioned_attempts", "003_executions_recent", "004_watched_attempts",
		"005_partitioned_executions", "006_records"} {
		sql, err := os.ReadFile("migrations/" + name + ".up.sql")
		if err != nil {
			t.Fatal(err)
		}
		exec(string(sql))
		exec(`INSERT INTO idem_schema_migrations VALUES ($1, $2, '2026-11-29 00:00:00Z')`, v+1, name[4:])
	}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	// What pgstore at migration 006 wrote for a completed keyed call.
	exec(`INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state, fencing_token,
			lease_expires_at, status, headers, body, completed_at, expires_at, attempts, outcome, started_at, finished_at, events)
		VALUES ('acme', 'exe_before', 'agent', 'op', 'fp-v1', 'k-before', true, 'completed', 21,
			$1::timestamptz + interval '1 minute', 201, '{"Content-Type":["application/json"]}', '{"id":"w0"}', $1::timestamptz,
			$1::timestamptz + interval '1 day', 1, 'succeeded', $1::timestamptz, $1::timestamptz, '[]')`, now)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate over existing rows: %v", err)
	}
	s := openStore(t, url, fakeclock.New(now.Add(time.Minute)))
	a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: "k-before"})
	if err != nil || a.FingerprintVersion != 0 || a.Fingerprint != "fp-v1" || a.State != idem.AttemptCompleted || a.Status != 201 || string(a.Body) != `{"id":"w0"}` {
		t.Fatalf("the record made before the migration = %+v, %v; want it as it was, version 0", a, err)
	}
	res, err := s.Reserve(ctx, idem.ReserveParams{
		StartParams: idem.StartParams{ExecutionID: "exe_after", Scope: scope, Operation: "op", Fingerprint: "fp-v2", FingerprintVersion: 2},
		Key:         "k-after", Lease: time.Minute, Retention: time.Hour,
	})
	if err != nil || !res.Reserved || res.Attempt.FingerprintVersion != 2 {
		t.Fatalf("a reservation after the migration = %+v, %v", res, err)
	}
	if a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: "k-after"}); err != nil || a.FingerprintVersion != 2 {
		t.Fatalf("the record reserved after the migration = %+v, %v; want version 2", a, err)
	}
}

// Migration 008 keeps the approvals made before it: they carry no rule and
// are decided by the approver role.
func TestApprovalRuleMigrationKeepsApprovals(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := newPool(t, url)
	ctx := t.Context()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	exec(`CREATE TABLE idem_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`)
	files, err := filepath.Glob("migrations/*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".up.sql")
		v, _ := strconv.Atoi(name[:3])
		if v >= 8 {
			break
		}
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		exec(string(sql))
		exec(`INSERT INTO idem_schema_migrations VALUES ($1, $2, '2026-11-29 00:00:00Z')`, v, name[4:])
	}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	exec(`INSERT INTO idem_approvals (org, id, requested_by, operation, fingerprint, input, reason, status, created_at, expires_at)
		VALUES ('acme', 'apr_old', 'agent-1', 'order.refund', 'fp', '{"amount":1}', 'old reason', 'pending', $1, $1::timestamptz + interval '1 hour')`, now)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate over existing rows: %v", err)
	}
	s := openStore(t, url, fakeclock.New(now))
	a, err := s.GetApproval(ctx, idem.GetApprovalParams{Org: "acme", ID: "apr_old"})
	if err != nil || a.Reason != "old reason" || a.Rule != "" || a.DecidedByRole() != idem.RoleApprover {
		t.Fatalf("old approval %+v, %v", a, err)
	}
	res, err := s.RequestApproval(ctx, idem.RequestApprovalParams{ID: "apr_new", Org: "acme", RequestedBy: "agent-1", Operation: "order.refund",
		Fingerprint: "fp2", Reason: "r", Expiry: time.Hour, Rule: "big-refunds", ApproverRole: "finance"})
	if err != nil || res.Approval.Rule != "big-refunds" || res.Approval.ApproverRole != "finance" {
		t.Fatalf("new approval %+v, %v", res.Approval, err)
	}
}
