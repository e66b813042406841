// Package storeerr holds what the stores' interpretError functions share:
// the rule that domain errors pass through, a done context comes back as
// itself, a statement the database refused because of what it was given is
// INTERNAL (a bug, not an outage), and every other failure is
// STORE_UNAVAILABLE.
package storeerr

import (
	"context"
	"errors"
	"fmt"

	"github.com/idem-run/idem"
)

// Refused reports whether err is a statement the database refused because
// of the data it was given, which no retry, reconnect or failover changes,
// and names it for the message (e.g. "SQLSTATE 22021: invalid byte sequence
// for encoding \"UTF8\": 0x00").
type Refused func(err error) (what string, ok bool)

// Interpret maps err from store (a name like "pgstore") during op. When the
// caller's ctx is done its error comes back, even if the driver reported
// something else (database/sql says sql.ErrTxDone for a transaction whose
// context was cancelled); a statement refused for its data is INTERNAL, not
// retryable; anything else, a deadline inside the driver with ctx still
// live (a connect timeout) included, is an unreachable database:
// STORE_UNAVAILABLE.
func Interpret(ctx context.Context, store, op string, err error, refused Refused) error {
	var domain *idem.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &domain), errors.Is(err, idem.ErrFenced), errors.Is(err, idem.ErrApprovalNotConsumable):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %s: %w", store, op, ctx.Err())
	}
	if what, ok := refused(err); ok {
		e := idem.Errorf(idem.CodeInternal, "%s: %s: the database refused a statement for its data (%s): this is a server bug, not an outage, and a retry fails the same way; report it with this message", store, op, what)
		e.Err = err
		return e
	}
	return idem.Unavailable(op, err)
}
