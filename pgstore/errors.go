package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-run/idem/internal/storeerr"
)

// interpretError is the one translation from driver errors to what the
// store returns: domain errors pass through, a done context comes back as
// its error, a statement refused for its data (RefusedStatement) is
// INTERNAL, and anything else — refused connections, a closed pool,
// terminated sessions and admin shutdowns, serialization failures that
// exhausted their retries, deadlines inside the driver such as
// connect_timeout — is STORE_UNAVAILABLE, so that callers fail closed.
func interpretError(ctx context.Context, op string, err error) error {
	return storeerr.Interpret(ctx, "pgstore", op, err, RefusedStatement)
}

// RefusedStatement reports a data exception (SQLSTATE class 22: a NUL or
// an invalid byte in text, \u0000 in jsonb, a value out of range) or an
// integrity constraint violation (class 23). The store handles the
// violations it expects in its statements (ON CONFLICT) or before calling
// interpretError (isSkip), so one that reaches here is a bug.
func RefusedStatement(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return "", false
	}
	switch pgErr.Code[:2] {
	case "22", "23":
		return fmt.Sprintf("SQLSTATE %s: %s", pgErr.Code, pgErr.Message), true
	}
	return "", false
}
