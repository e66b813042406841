package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// FenceIdleTimeout is how long a transaction holding a fence (CheckFence)
// may sit idle, its client sending nothing, before PostgreSQL ends it.
const FenceIdleTimeout = 10 * time.Second

// fenceIdleTimeout is FenceIdleTimeout, shortened by tests.
var fenceIdleTimeout = FenceIdleTimeout

// CheckFence makes an effect in the store's database conditional on the
// lease of the execution that makes it (SPEC §6.8). Call it inside the
// effect's own transaction (database/sql over pgx's stdlib), before the
// effect's writes: it passes only if the record of f is still in flight
// under f.FencingToken with more than margin of its lease left, judged by
// the database's clock, and then holds the record's row (FOR SHARE) until
// the transaction ends. A reader that finds the lease passed marks the
// record indeterminate with an UPDATE that waits for that lock (bounded;
// see Store.GetAttempt), so the effect either commits before anyone is
// told "indeterminate", and a reconcile read sees it, or fails here.
//
// It returns idem.LeaseLost(f) (errors.Is idem.ErrFenced) when the check
// fails: roll the transaction back and return that error from the
// handler. It passes for unkeyed calls (f.FencingToken 0). Keep the
// transaction short: while it runs, a reader of the key may wait for it.
// A transaction that then sits idle longer than FenceIdleTimeout (its
// executor paused, say) is ended by PostgreSQL, which rolls the effect back
// and releases the record, so a paused executor keeps its key answering
// "in flight" for that long at most.
func CheckFence(ctx context.Context, tx *sql.Tx, f idem.Fence, margin time.Duration) error {
	if f.FencingToken == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, idleTimeoutSQL, fenceIdle()); err != nil {
		return fmt.Errorf("pgstore: bound the idle time of the fenced transaction of key %q: %w", f.Key, err)
	}
	var one int
	err := tx.QueryRowContext(ctx, fenceSQL, fenceArgs(f, margin)...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return idem.LeaseLost(f)
	}
	if err != nil {
		return fmt.Errorf("pgstore: check the fence of key %q: %w", f.Key, err)
	}
	return nil
}

// CheckFencePgx is CheckFence for an effect whose transaction is pgx's
// own (pgx.Tx), with the same rules.
func CheckFencePgx(ctx context.Context, tx pgx.Tx, f idem.Fence, margin time.Duration) error {
	if f.FencingToken == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, idleTimeoutSQL, fenceIdle()); err != nil {
		return fmt.Errorf("pgstore: bound the idle time of the fenced transaction of key %q: %w", f.Key, err)
	}
	var one int
	err := tx.QueryRow(ctx, fenceSQL, fenceArgs(f, margin)...).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.LeaseLost(f)
	}
	if err != nil {
		return fmt.Errorf("pgstore: check the fence of key %q: %w", f.Key, err)
	}
	return nil
}

// fenceSQL holds the record of a fence if more than a margin of its lease
// is left by the database's clock.
var fenceSQL = statement("check_fence")

func fenceArgs(f idem.Fence, margin time.Duration) []any {
	return []any{f.Scope.Org, f.Scope.Principal, f.Key, f.FencingToken, margin.Seconds()}
}

// fenceIdle is idleTimeoutSQL's parameter for the fenced transaction.
func fenceIdle() string {
	return fmt.Sprintf("%dms", fenceIdleTimeout.Milliseconds())
}
