package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"idem"
)

// interpretError is the one place where driver errors become what the store
// returns. The store's own domain errors pass through; when the caller's
// context is done, its error comes back wrapped with op (database/sql may
// report a cancelled transaction as sql.ErrTxDone, hence ctx and not only
// err); everything else (SQLITE_BUSY once the busy timeout passed, a closed
// database, I/O errors, a read-only or full disk, a corrupt file, …) is
// STORE_UNAVAILABLE, so that callers fail closed.
func interpretError(ctx context.Context, op string, err error) error {
	var domain *idem.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &domain), errors.Is(err, idem.ErrFenced), errors.Is(err, idem.ErrApprovalNotConsumable):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	case ctx.Err() != nil:
		return fmt.Errorf("sqlitestore: %s: %w", op, ctx.Err())
	}
	return idem.Unavailable(op, err)
}
