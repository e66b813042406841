package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// An application's writes through Store.Write share the store's writer:
// they land with the store's own, concurrently, and keep their errors.
func TestApplicationWritesShareTheWriter(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	create := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE app_rows (n INTEGER PRIMARY KEY)`)
		return err
	}
	if err := s.Write(t.Context(), create); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				errs[i] = s.Write(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO app_rows (n) VALUES (?)`, i)
					return err
				})
				return
			}
			p := idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: fmt.Sprint("exe_", i), Scope: idem.Scope{Org: "acme", Principal: "a"},
				Operation: "op", Fingerprint: "f"}, Key: fmt.Sprint("k", i), Lease: time.Minute, Retention: time.Hour}
			res, err := s.Reserve(t.Context(), p)
			if err == nil && !res.Reserved {
				err = errors.New("not reserved")
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	var rows int
	if err := s.r.QueryRowContext(t.Context(), `SELECT count(*) FROM app_rows`).Scan(&rows); err != nil || rows != n/2 {
		t.Fatalf("app_rows holds %d rows (err %v), want %d", rows, err, n/2)
	}
	// A declared error comes back as it is; a statement refused for its
	// data is INTERNAL (a bug, not an outage); neither leaves a row behind.
	declared := &idem.Error{Code: "ROW_EXISTS", Status: 409, Message: "exists"}
	err = s.Write(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO app_rows (n) VALUES (-1)`); err != nil {
			return err
		}
		return declared
	})
	if idem.ErrorCode(err) != declared.Code {
		t.Errorf("declared error came back as %v", err)
	}
	err = s.Write(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO app_rows (n) VALUES (0)`) // a duplicate
		return err
	})
	if idem.ErrorCode(err) != idem.CodeInternal {
		t.Errorf("failed statement came back as %v, want INTERNAL", err)
	}
	if err := s.r.QueryRowContext(t.Context(), `SELECT count(*) FROM app_rows WHERE n = -1`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("a rolled-back write left %d rows (err %v)", rows, err)
	}
}

// Many readers at once on a fresh store, more than the read pool holds:
// preparing their first statements must not deadlock with the readers
// holding the pool's connections.
func TestConcurrentFirstReadsDoNotDeadlock(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 * readConns {
		wg.Go(func() {
			for j := range 20 {
				_, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: idem.Scope{Org: "acme", Principal: "a"}, Key: fmt.Sprint("k", i, "-", j)})
				if !errors.Is(err, idem.ErrNotFound) {
					t.Errorf("reader %d: %v", i, err)
					return
				}
				if _, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: "acme", ID: fmt.Sprint("exe_", i)}); !errors.Is(err, idem.ErrNotFound) {
					t.Errorf("reader %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
