package pgstore

import (
	"context"

	"idem/internal/storeerr"
)

// interpretError is the one translation from driver errors to what the
// store returns: domain errors pass through, a done context comes back as
// its error, and anything else — refused connections, a closed pool,
// terminated sessions, constraint or serialization failures that exhausted
// their retries, deadlines inside the driver such as connect_timeout — is
// STORE_UNAVAILABLE, so that callers fail closed.
func interpretError(ctx context.Context, op string, err error) error {
	return storeerr.Interpret(ctx, "pgstore", op, err)
}
