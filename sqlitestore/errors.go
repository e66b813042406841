package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idem-run/idem"
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

// interpretFileError is interpretError for the store on the database file
// at path: a STORE_UNAVAILABLE caused by the file itself (read-only, a full
// disk, a file that cannot be opened, an I/O error) also names the path and
// what to check, after SQLite's own words. That goes into the cause, which
// the server logs, and not into the message the caller is sent: the
// server's file paths are the operator's business, not the caller's.
func interpretFileError(ctx context.Context, path, op string, err error) error {
	err = interpretError(ctx, op, err)
	var e *idem.Error
	var se *sqlite.Error
	if !errors.As(err, &e) || e.Code != idem.CodeStoreUnavailable || !errors.As(err, &se) {
		return err
	}
	check := fileCheck(path, se.Code()&0xff)
	if check == "" {
		return err
	}
	c := *e
	c.Err = fmt.Errorf("%w; %s", e.Err, check)
	return &c
}

// fileCheck says, for SQLite's primary result code, what to check about
// the database file at path, or "" when the code is not about the file.
func fileCheck(path string, code int) string {
	dir := filepath.Dir(path)
	switch code {
	case sqlite3.SQLITE_READONLY:
		return fmt.Sprintf("SQLite database %s: SQLite may no longer write it: the file, its -wal or -shm file, or its directory %s became read-only, or the file was moved, deleted or replaced, since the store opened it; make them writable by this process (permissions, chattr -i, a read-write mount), put the file back, and restart the server", path, dir)
	case sqlite3.SQLITE_FULL:
		return fmt.Sprintf("SQLite database %s: the disk holding it is full, or the file reached its size limit; free space there (df -h %s)", path, dir)
	case sqlite3.SQLITE_CANTOPEN:
		return fmt.Sprintf("SQLite database %s: SQLite cannot open it or its -wal or -shm file; check that the file and its directory %s still exist and are readable and writable by this process", path, dir)
	case sqlite3.SQLITE_IOERR:
		return fmt.Sprintf("SQLite database %s: reading or writing it failed; check that the file, its -wal and -shm files and its directory %s are writable by this process (permissions, chattr +i, a read-only mount), that the disk is not full, and the kernel log for disk errors", path, dir)
	}
	return ""
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
