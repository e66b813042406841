package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"idem"
)

// interpretError is the one place where driver errors become idem errors.
// A cancelled or expired context comes back as the context's error; the
// store's own domain errors pass through; everything else (SQLITE_BUSY once
// the busy timeout passed, a closed database, I/O errors, a read-only or
// full disk, a corrupt file, …) is STORE_UNAVAILABLE, so that callers fail
// closed.
func interpretError(op string, err error) error {
	var domain *idem.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	case errors.As(err, &domain), errors.Is(err, idem.ErrFenced), errors.Is(err, idem.ErrApprovalNotConsumable):
		return err
	default:
		return idem.Unavailable(op, err)
	}
}
