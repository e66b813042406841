package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/sqlitetest"
	"github.com/idem-run/idem/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		path := filepath.Join(t.TempDir(), "idem.db")
		return storetest.Harness{
			Open: func(t *testing.T, clock idem.Clock) idem.Store {
				s, err := Open(t.Context(), path, idem.StoreConfig{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			},
			Break: func(t *testing.T) { sqlitetest.Destroy(t, path) },
			CheckFence: func(t *testing.T, f idem.Fence, margin time.Duration) error {
				db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				tx, err := db.BeginTx(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := CheckFence(t.Context(), tx, f, margin); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			Effect:  sqlitetest.Effect,
			Effects: func(t *testing.T) []string { return sqlitetest.Effects(t, path) },
		}
	})
}

func TestOpenMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "idem.db")
	_, err := Open(t.Context(), path, idem.StoreConfig{})
	if err == nil {
		t.Fatal("Open succeeded in a directory that does not exist")
	}
	if !strings.Contains(err.Error(), "no-such-dir") || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("Open error %q does not name the missing directory", err)
	}
}

func TestPragmas(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, db := range map[string]*sql.DB{"write": s.w, "read": s.r} {
		var mode string
		var sync, fk, busy int
		for pragma, dest := range map[string]any{"journal_mode": &mode, "synchronous": &sync, "foreign_keys": &fk, "busy_timeout": &busy} {
			if err := db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(dest); err != nil {
				t.Fatalf("%s pool: PRAGMA %s: %v", name, pragma, err)
			}
		}
		if mode != "wal" || sync != 2 || fk != 1 || busy != int(busyTimeout.Milliseconds()) {
			t.Errorf("%s pool: journal_mode=%s synchronous=%d foreign_keys=%d busy_timeout=%d; want wal, 2 (FULL), 1, %d",
				name, mode, sync, fk, busy, busyTimeout.Milliseconds())
		}
	}
}

// A write transaction holds SQLite's write lock from its start (BEGIN
// IMMEDIATE), so that read-then-write never fails to upgrade.
func TestWriteTransactionsAreImmediate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := Open(t.Context(), path, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx, err := s.w.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	other, err := sql.Open("sqlite", path) // no busy timeout: fails at once
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var e *sqlite.Error
	if _, err := other.Exec("BEGIN IMMEDIATE"); !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("BEGIN IMMEDIATE beside an open write transaction: err = %v, want SQLITE_BUSY", err)
	}
}

func TestMigrateTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := Open(t.Context(), path, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 {
		if err := Migrate(t.Context(), s.w); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
	}
	// A second instance migrates on open too.
	s2, err := Open(t.Context(), path, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var n, versions int
	if err := s.r.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version) FROM idem_schema_migrations`).Scan(&n, &versions); err != nil {
		t.Fatal(err)
	}
	if n != versions || n == 0 {
		t.Fatalf("idem_schema_migrations has %d rows for %d versions", n, versions)
	}
	var token int64
	if err := s.r.QueryRow(`SELECT value FROM idem_counters WHERE name = 'fencing_token'`).Scan(&token); err != nil || token != 0 {
		t.Fatalf("fencing counter = %d, %v; want one row at 0", token, err)
	}
}

func TestInterpretError(t *testing.T) {
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	// Real driver errors of statements refused for their data.
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (a TEXT PRIMARY KEY, b TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	_, notNull := db.Exec(`INSERT INTO t (a, b) VALUES ('x', NULL)`)
	_, _ = db.Exec(`INSERT INTO t (a, b) VALUES ('y', 'b')`)
	_, unique := db.Exec(`INSERT INTO t (a, b) VALUES ('y', 'b')`)
	internal := &idem.Error{Code: idem.CodeInternal}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want error // matched with errors.Is
	}{
		{"cancelled", t.Context(), context.Canceled, context.Canceled},
		{"deadline", t.Context(), context.DeadlineExceeded, context.DeadlineExceeded},
		{"transaction ended by a cancelled ctx", cancelled, sql.ErrTxDone, context.Canceled},
		{"fenced", t.Context(), idem.ErrFenced, idem.ErrFenced},
		{"fenced, ctx cancelled too", cancelled, idem.ErrFenced, idem.ErrFenced},
		{"approval not consumable", t.Context(), idem.ErrApprovalNotConsumable, idem.ErrApprovalNotConsumable},
		{"domain error", t.Context(), idem.Errorf(idem.CodeApprovalNotFound, "x"), &idem.Error{Code: idem.CodeApprovalNotFound}},
		{"connection gone", t.Context(), sql.ErrConnDone, idem.ErrStoreUnavailable},
		{"unknown", t.Context(), errors.New("disk I/O error"), idem.ErrStoreUnavailable},
		{"NOT NULL constraint", t.Context(), notNull, internal},
		{"UNIQUE constraint", t.Context(), unique, internal},
	} {
		if got := interpretError(tc.ctx, "op", tc.err); !errors.Is(got, tc.want) {
			t.Errorf("%s: interpretError = %v, want %v", tc.name, got, tc.want)
		}
	}
	if err := interpretError(cancelled, "op", nil); err != nil {
		t.Errorf("nil became %v", err)
	}
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: idem.Scope{Org: "o", Principal: "p"}, Key: "k"}); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("GetAttempt on a closed store: err = %v, want STORE_UNAVAILABLE", err)
	}
	if _, err := s.Sweep(t.Context(), idem.SweepParams{}); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("Sweep on a closed store: err = %v, want STORE_UNAVAILABLE", err)
	}
}

// Instances opened at once on a new file all come up: the switch to WAL and
// the migrations serialize instead of failing.
func TestConcurrentOpen(t *testing.T) {
	for range 3 {
		path := filepath.Join(t.TempDir(), "idem.db")
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := Open(t.Context(), path, idem.StoreConfig{})
				if err != nil {
					t.Errorf("concurrent Open: %v", err)
					return
				}
				s.Close()
			}()
		}
		wg.Wait()
	}
}

// fileCheck names the path, its directory and what to check for each
// SQLite code about the file (READONLY and CANTOPEN included, which
// TestWriteAfterFileBroken does not provoke), and nothing for the others.
func TestFileCheck(t *testing.T) {
	const path = "/srv/idem/idem.db"
	for code, want := range map[int]string{
		sqlite3.SQLITE_READONLY: "became read-only",
		sqlite3.SQLITE_FULL:     "is full",
		sqlite3.SQLITE_CANTOPEN: "cannot open it",
		sqlite3.SQLITE_IOERR:    "reading or writing it failed",
	} {
		if got := fileCheck(path, code); !strings.Contains(got, "SQLite database "+path+":") || !strings.Contains(got, "/srv/idem") || !strings.Contains(got, want) {
			t.Errorf("fileCheck(%d) = %q; want the path and %q", code, got, want)
		}
	}
	for _, code := range []int{sqlite3.SQLITE_BUSY, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_CONSTRAINT} {
		if got := fileCheck(path, code); got != "" {
			t.Errorf("fileCheck(%d) = %q; want nothing", code, got)
		}
	}
}
