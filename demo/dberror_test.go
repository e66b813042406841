package demo

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-run/idem"
)

// TestRefusedDataIsInternal: a statement the database refuses for its data
// (a NUL in text on PostgreSQL, a NOT NULL or unique violation the demo did
// not handle) is a bug, INTERNAL, never a faked outage (SPEC §11); a dead
// database stays STORE_UNAVAILABLE.
func TestRefusedDataIsInternal(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		err := e.app.db.InTx(ctx, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO idem_demo_orders (org, id, amount, created_at) VALUES (?, ?, ?, ?)`, "acme", "ord_1", 1, 0)
			return err
		})
		var ie *idem.Error
		if !errors.As(err, &ie) || ie.Code != idem.CodeInternal {
			t.Fatalf("duplicate order row: %v, want INTERNAL", err)
		}
		if e.app.db.dialect == "postgres" {
			err = e.app.db.InTx(ctx, func(tx *Tx) error {
				_, err := tx.Exec(ctx, `SELECT CAST(? AS text)`, "a\x00b")
				return err
			})
			if !errors.As(err, &ie) || ie.Code != idem.CodeInternal {
				t.Fatalf("NUL in text: %v, want INTERNAL", err)
			}
		}
		e.app.db.Close()
		err = e.app.db.InTx(ctx, func(tx *Tx) error { return nil })
		if !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Fatalf("closed pool: %v, want STORE_UNAVAILABLE", err)
		}
	})
}

// TestDeadConnection: only an error raised before COMMIT by a connection
// that was already gone makes a transaction run again; a refused
// statement, or anything at COMMIT (it may have applied), does not.
func TestDeadConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"database/sql bad connection before commit", errBeforeCommit{fmt.Errorf("begin: %w", driver.ErrBadConn)}, true},
		{"pgx closed connection before commit", errBeforeCommit{errors.New("conn closed")}, true},
		{"reset connection before commit", errBeforeCommit{errors.New("read: connection reset by peer")}, true},
		{"bad connection at commit", driver.ErrBadConn, false},
		{"refused statement before commit", errBeforeCommit{errors.New("duplicate key value violates unique constraint")}, false},
		{"no error", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deadConnection(tc.err); got != tc.want {
				t.Fatalf("deadConnection(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
