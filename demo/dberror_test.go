package demo

import (
	"context"
	"errors"
	"testing"

	"idem"
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
		e.app.db.sql.Close()
		err = e.app.db.InTx(ctx, func(tx *Tx) error { return nil })
		if !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Fatalf("closed pool: %v, want STORE_UNAVAILABLE", err)
		}
	})
}
