package pgstore

import (
	"context"
	"errors"
	"fmt"

	"idem"
)

// interpretError is the one translation from driver errors to what the
// store returns. Domain errors pass through; when the caller's context is
// done, its error comes back (wrapped with op); anything else — refused
// connections, a closed pool, terminated sessions, constraint or
// serialization failures that exhausted their retries, and deadlines inside
// the driver such as connect_timeout — is STORE_UNAVAILABLE, so that
// callers fail closed.
func interpretError(ctx context.Context, op string, err error) error {
	var domain *idem.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &domain), errors.Is(err, idem.ErrFenced), errors.Is(err, idem.ErrApprovalNotConsumable):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("pgstore: %s: %w", op, ctx.Err())
	}
	return idem.Unavailable(op, err)
}
