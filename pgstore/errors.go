package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

// MissingDatabaseError is Open's error when the server has no database of
// the URL's name (SQLSTATE 3D000 invalid_catalog_name at connect): a setup
// mistake that no retry fixes, so it is not STORE_UNAVAILABLE. Its message
// says how to create the database.
type MissingDatabaseError struct {
	Database string // the database the URL names
	Host     string // the server's host (or socket directory)
	Port     uint16
	User     string // the role that connected
	Err      error  // the server's error
}

func (e *MissingDatabaseError) Error() string {
	host := net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
	return fmt.Sprintf("pgstore: database %q does not exist on %s (SQLSTATE 3D000); create it, then run the command again: "+
		"createdb -h %s -p %d -U %s %s (or, as a role with CREATEDB: CREATE DATABASE %s;), or name an existing database in the store URL's path",
		e.Database, host, shellWord(e.Host), e.Port, shellWord(e.User), shellWord(e.Database), pgx.Identifier{e.Database}.Sanitize())
}

// Unwrap returns the server's error.
func (e *MissingDatabaseError) Unwrap() error { return e.Err }

// missingDatabase returns a *MissingDatabaseError when err is the server
// refusing a connection to a database it does not have, else nil.
func missingDatabase(err error) error {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" || !errors.As(err, &connErr) || connErr.Config == nil {
		return nil
	}
	c := connErr.Config
	return &MissingDatabaseError{Database: c.Database, Host: c.Host, Port: c.Port, User: c.User, Err: pgErr}
}

// LoginRefusedError is Open's error when the server refuses the URL's
// role (SQLSTATE class 28: the role does not exist, its password is
// wrong, or pg_hba.conf admits no such connection): a setup mistake that
// no retry fixes, so it is not STORE_UNAVAILABLE.
type LoginRefusedError struct {
	User string // the role that tried to connect
	Host string
	Port uint16
	Err  *pgconn.PgError // the server's error (its Code and Message)
}

func (e *LoginRefusedError) Error() string {
	return fmt.Sprintf("pgstore: the server at %s refused the role %q (SQLSTATE %s: %s); give a role it admits and its password in the store URL "+
		"(postgres://USER:PASSWORD@HOST:PORT/DB), or create the role (CREATE ROLE %s LOGIN PASSWORD '…';) or admit it in the server's pg_hba.conf",
		net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))), e.User, e.Err.Code, e.Err.Message, pgx.Identifier{e.User}.Sanitize())
}

// Unwrap returns the server's error.
func (e *LoginRefusedError) Unwrap() error { return e.Err }

// setupError returns what Open says instead of err when the server
// refused the connection for a reason no retry fixes (a database it does
// not have, a role it does not admit), else nil.
func setupError(err error) error {
	if missing := missingDatabase(err); missing != nil {
		return missing
	}
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "28") || !errors.As(err, &connErr) || connErr.Config == nil {
		return nil
	}
	c := connErr.Config
	return &LoginRefusedError{User: c.User, Host: c.Host, Port: c.Port, Err: pgErr}
}

// UnreachableError is Open's error when no connection to the server
// could be made: refused, unresolvable, or, with a connect timeout, a
// server that accepted the connection and did not answer within it. It
// is STORE_UNAVAILABLE (errors.Is idem.ErrStoreUnavailable): the server
// may come back. Its message names the server and what to check.
type UnreachableError struct {
	Host     string // the server's host (or socket directory)
	Port     uint16
	Database string
	User     string
	// Timeout is the connect timeout that passed; zero when the
	// connection failed otherwise.
	Timeout time.Duration
	Err     error // the STORE_UNAVAILABLE error, wrapping the driver's
}

func (e *UnreachableError) Error() string {
	addr := net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
	if e.Timeout > 0 {
		return fmt.Sprintf("pgstore: no answer from PostgreSQL at %s (database %q, user %q) within the connect timeout of %s: "+
			"check that %s is a PostgreSQL server (not another service, or a proxy or firewall that holds connections open), "+
			"that the server is not stopped, paused or overloaded (pg_isready -h %s -p %d), and the URL's sslmode; "+
			"a longer wait is the URL's connect_timeout=SECONDS (idem: --store-connect-timeout)",
			addr, e.Database, e.User, e.Timeout, addr, shellWord(e.Host), e.Port)
	}
	return fmt.Sprintf("pgstore: cannot connect to PostgreSQL at %s (database %q, user %q): %v; "+
		"check that the server runs and listens there (pg_isready -h %s -p %d) and that the store URL names the right host and port",
		addr, e.Database, e.User, errors.Unwrap(e.Err), shellWord(e.Host), e.Port)
}

// Unwrap returns the STORE_UNAVAILABLE error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// unreachable returns an *UnreachableError when err is a failure to
// connect (after a connect timeout of timeout, when it passed), else nil.
func unreachable(err error, timeout time.Duration) error {
	var connErr *pgconn.ConnectError
	if !errors.As(err, &connErr) || connErr.Config == nil {
		return nil
	}
	c := connErr.Config
	u := &UnreachableError{Host: c.Host, Port: c.Port, Database: c.Database, User: c.User, Err: err}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		u.Timeout = timeout
	}
	return u
}

// shellWord quotes s for a POSIX shell when it needs quoting.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:@%+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
