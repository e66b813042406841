// Package pgtest gives PostgreSQL-backed tests a fresh, private database.
//
// Tests find the server through IDEM_TEST_DATABASE_URL, a URL (or libpq
// keyword/value string) for a role that may CREATE DATABASE. `make test`
// (scripts/test.sh) starts a throwaway cluster and sets it, together with
// IDEM_TEST_REQUIRE_PG=1 so that a test that cannot reach PostgreSQL fails
// instead of being skipped. A bare `go test` without the variable skips
// PostgreSQL tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// EnvURL names the variable holding the admin connection string.
	EnvURL = "IDEM_TEST_DATABASE_URL"
	// EnvRequire names the variable that, set to 1, turns skips into failures.
	EnvRequire = "IDEM_TEST_REQUIRE_PG"

	// namePrefix starts every database this package creates.
	namePrefix = "idem_test_"
	// maxNameLen is PostgreSQL's identifier limit (NAMEDATALEN-1).
	maxNameLen = 63
	// adminTimeout bounds each short-lived admin connection.
	adminTimeout = 30 * time.Second
)

const (
	howToSet = "run `make test` (it starts a throwaway PostgreSQL cluster), " +
		"or set " + EnvURL + "=postgres://user:pass@host:port/db?sslmode=disable " +
		"for a role with CREATEDB"
	howToReach = "check that the server is up and " + EnvURL + " is right, " +
		"or unset it so that `make test` starts a throwaway PostgreSQL cluster"
)

// required reports whether IDEM_TEST_REQUIRE_PG=1.
func required() bool { return os.Getenv(EnvRequire) == "1" }

// unavailable skips the test, or fails it when PostgreSQL is required.
func unavailable(t testing.TB, hint, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if required() {
		t.Fatalf("pgtest: %s (%s=1): %s", msg, EnvRequire, hint)
	}
	t.Skipf("pgtest: %s; skipping: %s", msg, hint)
}

// URL returns the admin connection string from IDEM_TEST_DATABASE_URL.
// Without it the test is skipped, unless IDEM_TEST_REQUIRE_PG=1, in which
// case it fails.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		unavailable(t, howToSet, "%s is not set", EnvURL)
	}
	return u
}

// NewDatabase creates a fresh, empty database on the server named by
// IDEM_TEST_DATABASE_URL for this test and drops it when the test ends
// (t.Cleanup, WITH (FORCE)). It returns the new database's URL.
// Without IDEM_TEST_DATABASE_URL the test is skipped, unless
// IDEM_TEST_REQUIRE_PG=1, in which case it fails (t.Fatal) with a message
// telling how to run `make test` or set the variable.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := URL(t)
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		// A malformed variable is a configuration error, never a skip.
		t.Fatalf("pgtest: parse %s: %v", EnvURL, err)
	}
	name := databaseName(t.Name())
	dbURL, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		unavailable(t, howToReach, "cannot connect to %s: %v", EnvURL, err)
	}
	defer conn.Close(ctx)

	// template0 is never connected to (so concurrent CREATEs cannot collide
	// on it) and is pristine even if template1 was customised.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, cfg, name) })
	return dbURL
}

// dropDatabase drops name over a fresh admin connection. It runs from
// t.Cleanup, when the test's own context is already cancelled.
func dropDatabase(t testing.TB, cfg *pgx.ConnConfig, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Errorf("pgtest: drop database %s: connect: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	// FORCE (PostgreSQL 13+) terminates connections the test left open.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
	}
}

// databaseName returns a unique, valid, lower-case identifier that needs no
// quoting: idem_test_<sanitised test name>_<16 hex digits>.
func databaseName(testName string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	suffix := "_" + hex.EncodeToString(b[:])

	var sb strings.Builder
	underscore := true // no leading underscore; squeeze runs
	for _, r := range strings.ToLower(testName) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			sb.WriteRune(r)
			underscore = false
		} else if !underscore {
			sb.WriteByte('_')
			underscore = true
		}
	}
	mid := strings.TrimRight(sb.String(), "_")
	if room := maxNameLen - len(namePrefix) - len(suffix); len(mid) > room {
		mid = strings.TrimRight(mid[:room], "_")
	}
	if mid == "" {
		mid = "t"
	}
	return namePrefix + mid + suffix
}

// withDatabase returns admin with its database replaced by name. It accepts
// both URLs and libpq keyword/value strings, as pgx does.
func withDatabase(admin, name string) (string, error) {
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		u, err := url.Parse(admin)
		if err != nil {
			return "", fmt.Errorf("parse %s: %v", EnvURL, err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		if q := u.Query(); q.Has("dbname") {
			q.Del("dbname")
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	// Keyword/value: a later keyword overrides an earlier one. name needs
	// no quoting (see databaseName).
	return strings.TrimSpace(admin) + " dbname=" + name, nil
}
