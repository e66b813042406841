package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		url := pgtest.NewDatabase(t)
		effects := pgtest.EffectsDB(t, url)
		return storetest.Harness{
			Open: func(t *testing.T, clock idem.Clock) idem.Store {
				s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{Clock: clock})
				if err != nil {
					t.Fatalf("pgstore.Open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			},
			Break: func(t *testing.T) { breakDatabase(t, url) },
			CheckFence: func(t *testing.T, f idem.Fence, margin time.Duration) error {
				return inEffectTx(t, sqlDB(t, url), func(tx *sql.Tx) error { return pgstore.CheckFence(t.Context(), tx, f, margin) })
			},
			Effect: pgtest.Effect,
			Crash: func(ctx context.Context, tx any) {
				_, _ = tx.(pgx.Tx).Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			},
			Effects: func(t *testing.T) []string { return storetest.EffectNames(t, effects, nil) },
		}
	})
}

// sqlDB opens a database/sql pool on url through pgx's stdlib, as an
// application keeping its tables in the store's database would.
func sqlDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// inEffectTx runs fn in one transaction of db and commits if it returns
// nil.
func inEffectTx(t *testing.T, db *sql.DB, fn func(tx *sql.Tx) error) error {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// breakDatabase refuses new connections to the database at url and
// terminates the open ones, from an admin connection. Connections are
// allowed again at cleanup, before pgtest drops the database.
func breakDatabase(t *testing.T, url string) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	name := pgx.Identifier{cfg.Database}.Sanitize()
	admin := adminConn(t)
	if _, err := admin.Exec(t.Context(), "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := adminConn(t).Exec(context.Background(), "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true"); err != nil {
			t.Errorf("restore connections to %s: %v", name, err)
		}
	})
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, cfg.Database); err != nil {
		t.Fatal(err)
	}
}

// adminConn connects to IDEM_TEST_DATABASE_URL for the rest of the test.
func adminConn(t *testing.T) *pgx.Conn {
	conn, err := pgx.Connect(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there any more
	url := fmt.Sprintf("postgres://idem@127.0.0.1:%d/idem?sslmode=disable&connect_timeout=5", port)
	s, err := pgstore.Open(t.Context(), url, idem.StoreConfig{})
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("Open on a closed port: %v, %v; want STORE_UNAVAILABLE", s, err)
	}
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	s, err := pgstore.Open(t.Context(), pgtest.NewDatabase(t), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if _, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: idem.Scope{Org: "acme", Principal: "p"}, Key: "k"}); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("GetAttempt on a closed store: %v, want STORE_UNAVAILABLE", err)
	}
}

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pools := []*pgxpool.Pool{newPool(t, url), newPool(t, url)}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { errs[i] = pgstore.Migrate(t.Context(), pools[i%2]) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, Migrate %d: %v", round, i, err)
			}
		}
	}

	files, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if name, ok := strings.CutSuffix(f.Name(), ".up.sql"); ok {
			want = append(want, name)
		}
	}
	rows, err := pools[0].Query(t.Context(), "SELECT format('%s_%s', lpad(version::text, 3, '0'), name) FROM idem_schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("recorded migrations %v, want each of %v once", got, want)
	}

	// The store works on the migrated pool, and Close leaves a pool it does
	// not own open.
	s, err := pgstore.New(t.Context(), pools[1], idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartExecution(t.Context(), idem.StartParams{ExecutionID: "exe_1", Scope: idem.Scope{Org: "acme", Principal: "p"}, Operation: "op", Fingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := pools[1].Ping(t.Context()); err != nil {
		t.Fatalf("Close closed the caller's pool: %v", err)
	}
}

func TestOrgLeadsEveryPrimaryKey(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := newPool(t, url)
	if err := pgstore.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(t.Context(), `
		SELECT t.table_name, COALESCE(a.attname, '')
		FROM information_schema.tables t
		LEFT JOIN pg_index i ON i.indrelid = (quote_ident(t.table_schema) || '.' || quote_ident(t.table_name))::regclass AND i.indisprimary
		LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE t.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
		ORDER BY t.table_name`)
	if err != nil {
		t.Fatal(err)
	}
	type table struct{ Name, First string }
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[table])
	if err != nil {
		t.Fatal(err)
	}
	orgScoped := 0
	for _, tb := range tables {
		if tb.Name == "idem_schema_migrations" {
			continue
		}
		orgScoped++
		if tb.First != "org" {
			t.Errorf("table %s: primary key starts with %q, want org", tb.Name, tb.First)
		}
	}
	if orgScoped < 3 {
		t.Errorf("found %d org-scoped tables (%v), want at least records, approvals, audit events", orgScoped, tables)
	}
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Reservations replacing forgotten records race sweepers deleting them, on
// separate pools: every reservation must win, and nothing it made be swept.
func TestReserveRacesSweeper(t *testing.T) {
	url := pgtest.NewDatabase(t)
	clock := fakeclock.New(time.Now())
	open := func() *pgstore.Store {
		s, err := pgstore.Open(t.Context(), url, idem.StoreConfig{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	reserver, sweeper := open(), open()
	const keys = 200
	params := func(i int) idem.ReserveParams {
		return idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: fmt.Sprintf("exe_%d_%d", i, clock.Now().UnixNano()), Scope: idem.Scope{Org: "acme", Principal: "p"}, Operation: "op", Fingerprint: "fp"},
			Key:         fmt.Sprint("key-", i), Lease: time.Minute, Retention: time.Hour,
		}
	}
	for i := range keys {
		if _, err := reserver.Reserve(t.Context(), params(i)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour)

	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			r, err := sweeper.Sweep(t.Context(), idem.SweepParams{BatchSize: 10})
			if err != nil {
				t.Errorf("Sweep: %v", err)
				return
			}
			if r.Done(10) {
				return
			}
		}
	})
	for i := range keys {
		wg.Go(func() {
			res, err := reserver.Reserve(t.Context(), params(i))
			if err != nil || !res.Reserved {
				t.Errorf("Reserve over a forgotten record: %+v, %v", res, err)
			}
		})
	}
	wg.Wait()
	if _, err := sweeper.Sweep(t.Context(), idem.SweepParams{}); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if a, err := reserver.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: idem.Scope{Org: "acme", Principal: "p"}, Key: fmt.Sprint("key-", i)}); err != nil || a.State != idem.AttemptInFlight {
			t.Fatalf("key-%d after the race: %+v, %v", i, a, err)
		}
	}
}
