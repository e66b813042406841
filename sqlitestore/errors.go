package sqlitestore

import (
	"context"

	"idem/internal/storeerr"
)

// interpretError is the one place where driver errors become what the store
// returns: domain errors pass through, a done context comes back as its
// error, and everything else (SQLITE_BUSY once the busy timeout passed, a
// closed database, I/O errors, a read-only or full disk, a corrupt file, …)
// is STORE_UNAVAILABLE, so that callers fail closed.
func interpretError(ctx context.Context, op string, err error) error {
	return storeerr.Interpret(ctx, "sqlitestore", op, err)
}
