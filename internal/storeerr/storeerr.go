// Package storeerr holds what the stores' interpretError functions share:
// the rule that domain errors pass through, a done context comes back as
// itself, and every other failure is STORE_UNAVAILABLE.
package storeerr

import (
	"context"
	"errors"
	"fmt"

	"idem"
)

// Interpret maps err from store (a name like "pgstore") during op. When the
// caller's ctx is done its error comes back, even if the driver reported
// something else (database/sql says sql.ErrTxDone for a transaction whose
// context was cancelled); a deadline inside the driver with ctx still live
// (a connect timeout) is an unreachable database.
func Interpret(ctx context.Context, store, op string, err error) error {
	var domain *idem.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &domain), errors.Is(err, idem.ErrFenced), errors.Is(err, idem.ErrApprovalNotConsumable):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %s: %w", store, op, ctx.Err())
	}
	return idem.Unavailable(op, err)
}
