package pgstore_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
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

// partitions lists the hourly partitions of idem_attempts, oldest first.
func partitions(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'idem_attempts'::regclass AND c.relname <> 'idem_attempts_default' ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// spans names the partitions from the one holding first to the one
// holding last.
func spans(first, last time.Time) []string {
	var out []string
	for start := first.Truncate(pgstore.PartitionSpan); !start.After(last); start = start.Add(pgstore.PartitionSpan) {
		out = append(out, partitionOf(start))
	}
	return out
}

// partitionOf names the partition that holds records created at t.
func partitionOf(t time.Time) string {
	return "idem_attempts_p" + t.Truncate(pgstore.PartitionSpan).UTC().Format("2006010215")
}

// record is what a test knows of one row it made.
type record struct{ created, expires time.Time }

// wantPartitions is the partitions Sweep should leave at now, from the
// first sweep at first on, given the rows made: every partition up to the
// one partitionsAhead after now's, except past ones whose rows are all
// past retention.
func wantPartitions(first, now time.Time, rows []record) []string {
	var out []string
	last := now.Truncate(pgstore.PartitionSpan).Add(pgstore.PartitionsAhead * pgstore.PartitionSpan)
	for start := first.Truncate(pgstore.PartitionSpan); !start.After(last); start = start.Add(pgstore.PartitionSpan) {
		keep := start.Add(pgstore.PartitionSpan).After(now)
		for _, r := range rows {
			if r.created.Truncate(pgstore.PartitionSpan).Equal(start) && r.expires.After(now) {
				keep = true
			}
		}
		if keep {
			out = append(out, partitionOf(start))
		}
	}
	return out
}

// rowsOf returns the partition of every row of key, newest first.
func rowsOf(t *testing.T, pool *pgxpool.Pool, key string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT tableoid::regclass::text FROM idem_attempts
		WHERE org = $1 AND principal = $2 AND key = $3 ORDER BY created_at DESC`, scope.Org, scope.Principal, key)
	if err != nil {
		t.Fatal(err)
	}
	where, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return where
}

func sweep(t *testing.T, s *pgstore.Store) idem.SweepResult {
	t.Helper()
	r, err := s.Sweep(t.Context(), idem.SweepParams{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Three days of hourly sweeps under a fake clock: partitions are made
// ahead of the clock, records land in the partition of their time, and a
// partition is dropped, rows and all, once every row in it is past
// retention; a record with a longer retention keeps its partition.
func TestPartitionsFollowTheClock(t *testing.T) {
	url := pgtest.NewDatabase(t)
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)

	r := sweep(t, s)
	want := spans(start, start.Add(pgstore.PartitionsAhead*pgstore.PartitionSpan))
	if got := partitions(t, pool); r.PartitionsCreated != len(want) || !slices.Equal(got, want) {
		t.Fatalf("first sweep created %d partitions: %v, want %v", r.PartitionsCreated, got, want)
	}
	rows := map[string]record{} // the live row of each key, by the test's account
	reserve := func(key string, retention time.Duration) {
		t.Helper()
		res, err := s.Reserve(t.Context(), reserveFor(key, retention))
		if err != nil || !res.Reserved {
			t.Fatalf("Reserve(%s) = %+v, %v; want a new record", key, res, err)
		}
		now := clock.Now()
		rows[key] = record{now, now.Add(retention)}
		if where := rowsOf(t, pool, key); !slices.Equal(where, []string{partitionOf(now)}) {
			t.Fatalf("%s stored in %v, want one row, in %s", key, where, partitionOf(now))
		}
	}
	// Two records at the start; "long" outlives "short" by a day.
	reserve("short", 24*time.Hour)
	reserve("long", 48*time.Hour)

	created, dropped := r.PartitionsCreated, 0
	for step := 1; step <= 72; step++ {
		clock.Advance(time.Hour)
		now := clock.Now()
		reserve(fmt.Sprint("h-", step), 24*time.Hour)
		switch step {
		case 30:
			// "short" is forgotten but its partition lives on with "long":
			// the key is reserved anew, and its old row goes.
			if _, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "short"}); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("short past retention: err = %v, want NOT_FOUND", err)
			}
			if !slices.Contains(partitions(t, pool), partitionOf(start)) {
				t.Fatalf("the partition of short and long is gone while long lives")
			}
			reserve("short", 24*time.Hour)
		case 60:
			// A key whose partition was dropped is reserved anew.
			if n := len(rowsOf(t, pool, "h-1")); n != 0 {
				t.Fatalf("h-1, 59 hours old, still has %d rows", n)
			}
			reserve("h-1", 24*time.Hour)
		}
		r := sweep(t, s)
		created += r.PartitionsCreated
		dropped += r.PartitionsDropped
		if r.Forgotten != 0 {
			t.Fatalf("step %d: %d rows deleted one by one, want none (all rows are in their partitions)", step, r.Forgotten)
		}
		var all []record
		for _, r := range rows {
			all = append(all, r)
		}
		want := wantPartitions(start, now, all)
		if got := partitions(t, pool); !slices.Equal(got, want) {
			t.Fatalf("step %d (%s): partitions %v, want %v", step, now.Format(time.DateTime), got, want)
		}
		if created-dropped != len(want) {
			t.Fatalf("step %d: sweeps counted %d created and %d dropped, but %d exist", step, created, dropped, len(want))
		}
		// Within retention: readable. Past it: not found, and its rows are
		// gone once its partition is.
		for key, r := range rows {
			a, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: key})
			switch {
			case r.expires.After(now):
				if err != nil || !a.CreatedAt.Equal(r.created) {
					t.Fatalf("step %d: %s within retention = %+v, %v; want it readable", step, key, a, err)
				}
			case !errors.Is(err, idem.ErrNotFound):
				t.Fatalf("step %d: %s past retention: err = %v, want NOT_FOUND", step, key, err)
			case !slices.Contains(want, partitionOf(r.created)) && len(rowsOf(t, pool, key)) != 0:
				t.Fatalf("step %d: %s's partition is gone but it still has rows %v", step, key, rowsOf(t, pool, key))
			}
		}
	}
	// Everything of the first day is gone by the end of the third.
	if min := int(24 * time.Hour / pgstore.PartitionSpan); dropped < min {
		t.Fatalf("%d partitions dropped over 72 hours, want at least %d", dropped, min)
	}
	if inDefault := queryInt(t, pool, `SELECT count(*) FROM idem_attempts_default`); inDefault != 0 {
		t.Fatalf("%d rows in the DEFAULT partition, want none: every range had its partition", inDefault)
	}
}

// Rows whose time has no partition land in the DEFAULT partition. A few
// move into their partition when the sweeper makes it; too many to move
// under the table lock keep their range from getting a partition and are
// deleted row by row when they expire.
func TestDefaultPartition(t *testing.T) {
	url := pgtest.NewDatabase(t)
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)
	early, err := s.Reserve(t.Context(), reserveFor("early", 24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if where := rowsOf(t, pool, "early"); !slices.Equal(where, []string{"idem_attempts_default"}) {
		t.Fatalf("early, before any sweep, stored in %v", where)
	}
	// More rows than a partition takes over, in the next range, as an
	// instance whose clock runs ahead would write them.
	const bulk = 10001
	ahead := start.Add(pgstore.PartitionSpan)
	if _, err := pool.Exec(t.Context(), `INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state,
			execution_id, fencing_token, lease_expires_at, created_at, expires_at)
		SELECT 'acme', 'agent', 'bulk-' || x, 'op', 'fp', 'completed', 'exe_bulk' || x, -x, $1, $1, $2
		FROM generate_series(1, $3::int) x`, ahead, ahead.Add(24*time.Hour), bulk); err != nil {
		t.Fatal(err)
	}

	r := sweep(t, s)
	if got, want := partitions(t, pool), []string{partitionOf(start)}; r.PartitionsCreated != 1 || !slices.Equal(got, want) {
		t.Fatalf("sweep created %d: %v, want %v (the next range has too many rows in DEFAULT)", r.PartitionsCreated, got, want)
	}
	if where := rowsOf(t, pool, "early"); !slices.Equal(where, []string{partitionOf(start)}) {
		t.Fatalf("early after the sweep stored in %v, want moved into %s", where, partitionOf(start))
	}
	if a, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "early"}); err != nil || a.FencingToken != early.Attempt.FencingToken {
		t.Fatalf("early after the move = %+v, %v", a, err)
	}
	// The partition made by moving rows has the indexes, primary key
	// first, of one made directly.
	var indexes []string
	rows, err := pool.Query(t.Context(), `SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		WHERE x.indrelid = $1::regclass ORDER BY NOT x.indisprimary, i.relname`, partitionOf(start))
	if err == nil {
		indexes, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(indexes) != 4 || indexes[0] != partitionOf(start)+"_pkey" {
		t.Fatalf("indexes of %s: %v, %v; want the primary key and the three of the parent", partitionOf(start), indexes, err)
	}
	countDefault := func() int { return queryInt(t, pool, `SELECT count(*) FROM idem_attempts_default`) }
	if n := countDefault(); n != bulk {
		t.Fatalf("%d rows in DEFAULT, want the %d of the next range", n, bulk)
	}

	// Past their retention the bulk rows are deleted one by one; then
	// their range, now current, gets its partition.
	clock.Advance(pgstore.PartitionSpan + 24*time.Hour)
	if r, err := s.Sweep(t.Context(), idem.SweepParams{BatchSize: 2 * bulk}); err != nil || r.Forgotten != bulk {
		t.Fatalf("sweep past retention = %+v, %v; want %d forgotten", r, err, bulk)
	}
	if n := countDefault(); n != 0 {
		t.Fatalf("%d rows left in DEFAULT", n)
	}
	now := clock.Now()
	if got, want := partitions(t, pool), spans(now, now.Add(pgstore.PartitionsAhead*pgstore.PartitionSpan)); !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}
}

// Two instances on separate pools reserve and sweep at once while the
// clock runs over two days: every partition is created once and dropped
// once across them, records within retention stay, and keys past
// retention are reserved anew by exactly one instance.
func TestPartitionRetentionAcrossInstances(t *testing.T) {
	url := pgtest.NewDatabase(t)
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	stores := []*pgstore.Store{openStore(t, url, clock), openStore(t, url, clock)}
	pool := newPool(t, url)

	var mu sync.Mutex
	created, dropped := 0, 0
	sweepAll := func() {
		var wg sync.WaitGroup
		for _, s := range stores {
			for range 2 {
				wg.Go(func() {
					r, err := s.Sweep(t.Context(), idem.SweepParams{})
					if err != nil {
						t.Errorf("Sweep: %v", err)
						return
					}
					mu.Lock()
					created += r.PartitionsCreated
					dropped += r.PartitionsDropped
					mu.Unlock()
				})
			}
		}
		wg.Wait()
	}
	sweepAll()

	const keysPerHour = 8
	for hour := 1; hour <= 50; hour++ {
		clock.Advance(time.Hour)
		// Reservations race the sweepers: each key of this hour from both
		// instances, and the same keys again 25 hours later, when their
		// first records are past retention.
		var wg sync.WaitGroup
		wins := make([]int, keysPerHour)
		for k := range keysPerHour {
			key := fmt.Sprintf("k-%d-%d", hour%25, k)
			for _, s := range stores {
				wg.Go(func() {
					res, err := s.Reserve(t.Context(), reserveFor(key, 24*time.Hour))
					if err != nil {
						t.Errorf("Reserve(%s): %v", key, err)
						return
					}
					if res.Reserved {
						mu.Lock()
						wins[k]++
						mu.Unlock()
					}
				})
			}
		}
		wg.Go(sweepAll)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for k, n := range wins {
			if n != 1 {
				t.Fatalf("hour %d: key %d reserved %d times, want once", hour, k, n)
			}
		}
	}
	// Quiet now: the sweeps settle whatever a lock timeout deferred.
	for range 3 {
		sweepAll()
	}
	now := clock.Now()
	var made []record
	for hour := 1; hour <= 50; hour++ {
		created := start.Add(time.Duration(hour) * time.Hour)
		made = append(made, record{created, created.Add(24 * time.Hour)})
	}
	want := wantPartitions(start, now, made)
	if got := partitions(t, pool); !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	if n := len(partitions(t, pool)); created-dropped != n {
		t.Fatalf("instances counted %d created and %d dropped, but %d exist: a change was counted twice or missed", created, dropped, n)
	}
	if min := int(24 * time.Hour / pgstore.PartitionSpan); dropped < min {
		t.Fatalf("%d partitions dropped over 50 hours, want at least %d", dropped, min)
	}
	var stale, live int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE expires_at <= $1), count(*) FILTER (WHERE expires_at > $1)
		FROM idem_attempts`, now).Scan(&stale, &live); err != nil {
		t.Fatal(err)
	}
	if live != 24*keysPerHour {
		t.Fatalf("%d records within retention, want %d (24 hours of %d)", live, 24*keysPerHour, keysPerHour)
	}
	for hour := 26; hour <= 50; hour++ {
		for k := range keysPerHour {
			key := fmt.Sprintf("k-%d-%d", hour%25, k)
			if n := len(rowsOf(t, pool, key)); n > 1 {
				t.Fatalf("key %s has %d rows, want at most one", key, n)
			}
		}
	}
	t.Logf("%d partitions created, %d dropped; %d stale rows await their partition's drop", created, dropped, stale)
}

// Migration 002 moves the records of an existing deployment into the
// partitioned table: they stay readable, replayable and completable, and
// each lands in the partition of its hour.
func TestMigrationKeepsExistingRows(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := newPool(t, url)
	initial, err := os.ReadFile("migrations/001_initial.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := pool.Exec(ctx, string(initial)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE idem_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL);
		INSERT INTO idem_schema_migrations VALUES (1, 'initial', '2026-11-29 00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	var kind string
	if err := pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'idem_attempts'::regclass`).Scan(&kind); err != nil || kind != "r" {
		t.Fatalf("before 002: idem_attempts relkind %q, %v; want a plain table", kind, err)
	}

	// Records written by the store onto the 001 schema, over several hours.
	clock := fakeclock.New(time.Date(2026, 11, 30, 9, 15, 0, 0, time.UTC))
	old, err := pgstore.New(ctx, pool, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var before []idem.Attempt
	for i := range 6 {
		if i > 0 {
			clock.Advance(50 * time.Minute)
		}
		res, err := old.Reserve(ctx, reserveFor(fmt.Sprint("old-", i), 24*time.Hour))
		if err != nil || !res.Reserved {
			t.Fatalf("Reserve on 001: %+v, %v", res, err)
		}
		a := res.Attempt
		if i%2 == 0 {
			// Completed as the store of schema 001 did (today's Complete
			// also reads columns later migrations add).
			if _, err := pool.Exec(ctx, `UPDATE idem_attempts SET state = 'completed', status = 201, headers = '{}',
					body = $4, completed_at = $5 WHERE org = $1 AND principal = $2 AND key = $3`,
				scope.Org, scope.Principal, a.Key, []byte(fmt.Sprintf(`{"n":%d}`, i)), clock.Now()); err != nil {
				t.Fatal(err)
			}
			if a, err = old.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: a.Key}); err != nil {
				t.Fatal(err)
			}
		}
		before = append(before, a)
	}

	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate over existing rows: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'idem_attempts'::regclass`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("after 002: idem_attempts relkind %q, %v; want partitioned", kind, err)
	}
	if got, want := partitions(t, pool), spans(before[0].CreatedAt, before[5].CreatedAt); !slices.Equal(got, want) {
		t.Fatalf("partitions made for the existing rows: %v, want %v", got, want)
	}
	s := openStore(t, url, clock)
	for _, b := range before {
		a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: b.Key})
		if err != nil {
			t.Fatalf("%s after the migration: %v", b.Key, err)
		}
		if b.LeasePassed(clock.Now()) { // all but the last: read, they are made indeterminate
			b.State = idem.AttemptIndeterminate
		}
		if a.FencingToken != b.FencingToken || a.State != b.State || a.Status != b.Status || string(a.Body) != string(b.Body) ||
			!a.CreatedAt.Equal(b.CreatedAt) || !a.ExpiresAt.Equal(b.ExpiresAt) || a.ExecutionID != b.ExecutionID {
			t.Fatalf("%s after the migration = %+v, want %+v", b.Key, a, b)
		}
		if where := rowsOf(t, pool, b.Key); !slices.Equal(where, []string{partitionOf(b.CreatedAt)}) {
			t.Fatalf("%s stored in %v, want %s", b.Key, where, partitionOf(b.CreatedAt))
		}
		res, err := s.Reserve(ctx, reserveFor(b.Key, 24*time.Hour))
		if err != nil || res.Reserved || res.Attempt.FencingToken != b.FencingToken {
			t.Fatalf("Reserve of %s after the migration = %+v, %v; want the existing record", b.Key, res, err)
		}
	}
	// The fencing sequence carried on: a new record gets a new token.
	res, err := s.Reserve(ctx, reserveFor("new", 24*time.Hour))
	if err != nil || !res.Reserved || res.Attempt.FencingToken <= before[5].FencingToken {
		t.Fatalf("new reservation after the migration = %+v, %v", res, err)
	}
	// The last record, in flight within its lease, completes.
	last := before[5]
	done, err := s.Complete(ctx, idem.CompleteParams{Scope: scope, Key: last.Key, FencingToken: last.FencingToken, Status: 200,
		Body: []byte(`{}`), Finish: idem.FinishParams{Org: scope.Org, ExecutionID: last.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1}})
	if err != nil || done.State != idem.AttemptCompleted {
		t.Fatalf("Complete of %s after the migration = %+v, %v", last.Key, done, err)
	}
	if inDefault := queryInt(t, pool, `SELECT count(*) FROM idem_attempts_default`); inDefault != 0 {
		t.Fatalf("%d rows in the DEFAULT partition after the migration, want none", inDefault)
	}
}
