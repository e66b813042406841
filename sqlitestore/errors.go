package sqlitestore

import (
	"context"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idem-run/idem/internal/storeerr"
)

// interpretError is the one place where driver errors become what the store
// returns: domain errors pass through, a done context comes back as its
// error, a statement refused for its data (RefusedStatement) is INTERNAL,
// and everything else (SQLITE_BUSY once the busy timeout passed, a closed
// database, I/O errors, a read-only or full disk, a corrupt file, …) is
// STORE_UNAVAILABLE, so that callers fail closed.
func interpretError(ctx context.Context, op string, err error) error {
	return storeerr.Interpret(ctx, "sqlitestore", op, err, RefusedStatement)
}

// RefusedStatement reports a statement SQLite refused for the data it was
// given: a constraint violation the statement did not handle (ON
// CONFLICT), a datatype mismatch, a value too big, a parameter out of
// range.
func RefusedStatement(err error) (string, bool) {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return "", false
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_RANGE:
		return "SQLite: " + e.Error(), true
	}
	return "", false
}
