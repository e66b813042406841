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

	"idem"
	"idem/internal/fakeclock"
	"idem/internal/pgtest"
	"idem/pgstore"
)

var scope = idem.Scope{Org: "acme", Principal: "agent"}

func reserveFor(key string, retention time.Duration) idem.ReserveParams {
	return idem.ReserveParams{
		StartParams: idem.StartParams{ExecutionID: fmt.Sprintf("exe_%s_%d", key, time.Now().UnixNano()), Scope: scope, Operation: "op", Fingerprint: "fp"},
		Key:         key, Lease: time.Minute, Retention: retention,
	}
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

// hours names the partitions of the hours from first to last.
func hours(first, last time.Time) []string {
	var out []string
	for h := first.Truncate(time.Hour); !h.After(last); h = h.Add(time.Hour) {
		out = append(out, "idem_attempts_p"+h.UTC().Format("2006010215"))
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
// ahead of the clock, records land in the partition of their hour, and a
// partition is dropped, rows and all, once every row in it is past
// retention; a record with a longer retention keeps its partition.
func TestPartitionsFollowTheClock(t *testing.T) {
	url := pgtest.NewDatabase(t)
	start := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	s := openStore(t, url, clock)
	pool := newPool(t, url)

	r := sweep(t, s)
	if want := hours(start, start.Add(3*time.Hour)); r.PartitionsCreated != 4 || !slices.Equal(partitions(t, pool), want) {
		t.Fatalf("first sweep created %d partitions: %v, want %v", r.PartitionsCreated, partitions(t, pool), want)
	}
	// Two records in the first hour; "long" outlives "short" by a day.
	for key, retention := range map[string]time.Duration{"short": 24 * time.Hour, "long": 48 * time.Hour} {
		if _, err := s.Reserve(t.Context(), reserveFor(key, retention)); err != nil {
			t.Fatal(err)
		}
		if where := rowsOf(t, pool, key); !slices.Equal(where, []string{"idem_attempts_p2026113010"}) {
			t.Fatalf("%s stored in %v, want the partition of its hour", key, where)
		}
	}

	created, dropped := 4, 0
	for step := 1; step <= 72; step++ {
		clock.Advance(time.Hour)
		now := clock.Now()
		key := fmt.Sprint("h-", step)
		if _, err := s.Reserve(t.Context(), reserveFor(key, 24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		r := sweep(t, s)
		created += r.PartitionsCreated
		dropped += r.PartitionsDropped
		if r.Forgotten != 0 {
			t.Fatalf("step %d: %d rows deleted one by one, want none (all rows are in hourly partitions)", step, r.Forgotten)
		}

		// Kept: the last 24 hours (each holds a record within retention),
		// the hour of "long" while it lives, and 3 hours ahead.
		want := hours(now.Add(-23*time.Hour), now.Add(3*time.Hour))
		if now.Before(start.Add(48*time.Hour)) && !slices.Contains(want, "idem_attempts_p2026113010") {
			want = append([]string{"idem_attempts_p2026113010"}, want...)
		}
		if step < 24 {
			want = hours(start, now.Add(3*time.Hour))
		}
		if got := partitions(t, pool); !slices.Equal(got, want) {
			t.Fatalf("step %d (%s): partitions %v, want %v", step, now.Format(time.DateTime), got, want)
		}
		if created-dropped != len(want) {
			t.Fatalf("step %d: sweeps counted %d created and %d dropped, but %d exist", step, created, dropped, len(want))
		}

		// Within retention: readable. Past it: not found, and its rows are
		// gone once its partition is.
		for back := 1; back <= step; back++ {
			if back == 1 && step >= 60 {
				continue // reserved anew at step 60
			}
			k := fmt.Sprint("h-", back)
			age := time.Duration(step-back) * time.Hour
			a, err := s.GetAttempt(t.Context(), scope, k)
			switch {
			case age < 24*time.Hour:
				if err != nil || a.Key != k {
					t.Fatalf("step %d: %s (age %v) = %+v, %v; want it readable", step, k, age, a, err)
				}
			case !errors.Is(err, idem.ErrNotFound):
				t.Fatalf("step %d: %s (age %v): err = %v, want NOT_FOUND", step, k, age, err)
			case age >= 25*time.Hour && len(rowsOf(t, pool, k)) != 0:
				t.Fatalf("step %d: %s (age %v) still has rows %v", step, k, age, rowsOf(t, pool, k))
			}
		}

		switch step {
		case 30:
			// "short" is forgotten but its partition lives on with "long":
			// the key is reserved anew in the current hour, and the old
			// row is gone with it.
			if _, err := s.GetAttempt(t.Context(), scope, "short"); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("short past retention: err = %v, want NOT_FOUND", err)
			}
			res, err := s.Reserve(t.Context(), reserveFor("short", 24*time.Hour))
			if err != nil || !res.Reserved {
				t.Fatalf("Reserve of forgotten short = %+v, %v", res, err)
			}
			if where := rowsOf(t, pool, "short"); !slices.Equal(where, hours(now, now)) {
				t.Fatalf("short after its new reservation: rows in %v, want one, in %v", where, hours(now, now))
			}
			if a, err := s.GetAttempt(t.Context(), scope, "long"); err != nil || a.Key != "long" {
				t.Fatalf("long within its retention = %+v, %v", a, err)
			}
		case 60:
			if len(rowsOf(t, pool, "long")) != 0 {
				t.Fatalf("long past 48 h still has rows %v", rowsOf(t, pool, "long"))
			}
			// A key whose partition was dropped is reserved anew.
			res, err := s.Reserve(t.Context(), reserveFor("h-1", 24*time.Hour))
			if err != nil || !res.Reserved {
				t.Fatalf("Reserve of h-1 after its partition went = %+v, %v", res, err)
			}
			if where := rowsOf(t, pool, "h-1"); !slices.Equal(where, hours(now, now)) {
				t.Fatalf("h-1 reserved anew: rows in %v, want one, in %v", where, hours(now, now))
			}
		}
	}
	var inDefault int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM idem_attempts_default`).Scan(&inDefault); err != nil {
		t.Fatal(err)
	}
	if inDefault != 0 {
		t.Fatalf("%d rows in the DEFAULT partition, want none: every hour had its partition", inDefault)
	}
}

// Rows whose hour has no partition land in the DEFAULT partition, block
// that hour's partition (which would have to take them over), and are
// deleted row by row when they expire.
func TestDefaultPartitionSweptByRow(t *testing.T) {
	url := pgtest.NewDatabase(t)
	clock := fakeclock.New(time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC))
	s := openStore(t, url, clock)
	pool := newPool(t, url)
	if _, err := s.Reserve(t.Context(), reserveFor("early", 24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	r := sweep(t, s)
	if want := hours(clock.Now().Add(time.Hour), clock.Now().Add(3*time.Hour)); r.PartitionsCreated != 3 || !slices.Equal(partitions(t, pool), want) {
		t.Fatalf("sweep created %d: %v, want %v (not the hour that has a row in DEFAULT)", r.PartitionsCreated, partitions(t, pool), want)
	}
	if where := rowsOf(t, pool, "early"); !slices.Equal(where, []string{"idem_attempts_default"}) {
		t.Fatalf("early stored in %v", where)
	}
	clock.Advance(24 * time.Hour)
	if r := sweep(t, s); r.Forgotten != 1 {
		t.Fatalf("sweep past retention forgot %d rows, want early", r.Forgotten)
	}
	if where := rowsOf(t, pool, "early"); len(where) != 0 {
		t.Fatalf("early still stored in %v", where)
	}
}

// Two instances on separate pools reserve and sweep at once while the
// clock runs over two days: every partition is created once and dropped
// once across them, records within retention stay, and keys past
// retention are reserved anew by exactly one instance.
func TestPartitionRetentionAcrossInstances(t *testing.T) {
	url := pgtest.NewDatabase(t)
	clock := fakeclock.New(time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC))
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
	// The records of 24 hours ago expire right now: their partition goes.
	want := hours(now.Add(-23*time.Hour), now.Add(3*time.Hour))
	if got := partitions(t, pool); !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	if n := len(partitions(t, pool)); created-dropped != n {
		t.Fatalf("instances counted %d created and %d dropped, but %d exist: a change was counted twice or missed", created, dropped, n)
	}
	if dropped < 20 {
		t.Fatalf("%d partitions dropped over 50 hours, want at least 20", dropped)
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
	old := pgstore.New(pool, idem.StoreConfig{Clock: clock})
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
			if a, err = old.Complete(ctx, idem.CompleteParams{Scope: scope, Key: a.Key, FencingToken: a.FencingToken, Status: 201,
				Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Finish: idem.FinishParams{Org: scope.Org, ExecutionID: a.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1}}); err != nil {
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
	if got, want := partitions(t, pool), hours(before[0].CreatedAt, before[5].CreatedAt); !slices.Equal(got, want) {
		t.Fatalf("partitions made for the existing rows: %v, want %v", got, want)
	}
	s := openStore(t, url, clock)
	for _, b := range before {
		a, err := s.GetAttempt(ctx, scope, b.Key)
		if err != nil {
			t.Fatalf("%s after the migration: %v", b.Key, err)
		}
		b = b.Observe(clock.Now()) // the leases of all but the last have passed
		if a.FencingToken != b.FencingToken || a.State != b.State || a.Status != b.Status || string(a.Body) != string(b.Body) ||
			!a.CreatedAt.Equal(b.CreatedAt) || !a.ExpiresAt.Equal(b.ExpiresAt) || a.ExecutionID != b.ExecutionID {
			t.Fatalf("%s after the migration = %+v, want %+v", b.Key, a, b)
		}
		if where := rowsOf(t, pool, b.Key); !slices.Equal(where, hours(b.CreatedAt, b.CreatedAt)) {
			t.Fatalf("%s stored in %v, want %v", b.Key, where, hours(b.CreatedAt, b.CreatedAt))
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
	var inDefault int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_attempts_default`).Scan(&inDefault); err != nil || inDefault != 0 {
		t.Fatalf("%d rows in the DEFAULT partition after the migration (%v), want none", inDefault, err)
	}
}
