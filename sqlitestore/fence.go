package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-run/idem"
)

// CheckFence makes an effect in the store's database conditional on the
// lease of the execution that makes it (SPEC §6.8). Call it inside the
// effect's own write transaction (BEGIN IMMEDIATE, or a transaction of
// Store.Write), before the effect's writes: it passes only if the record
// of f is still in flight under f.FencingToken with more than margin of
// its lease left, by the system clock (the store's clock on one machine).
// SQLite has one writer: a reader that finds the lease passed marks the
// record indeterminate in a write transaction too, so the effect either
// commits before anyone is told "indeterminate" or fails here.
//
// It returns idem.LeaseLost(f) (errors.Is idem.ErrFenced) when the check
// fails: roll back and return that error from the handler. It passes for
// unkeyed calls (f.FencingToken 0).
func CheckFence(ctx context.Context, tx *sql.Tx, f idem.Fence, margin time.Duration) error {
	if f.FencingToken == 0 {
		return nil
	}
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM idem_records
		WHERE `+byKey+` AND fencing_token = ?4 AND state = 'in_flight' AND lease_expires_at > ?5`,
		f.Scope.Org, f.Scope.Principal, f.Key, f.FencingToken, micros(time.Now().Add(margin))).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return idem.LeaseLost(f)
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: check the fence of key %q: %w", f.Key, err)
	}
	return nil
}
