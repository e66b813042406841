package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// A URL naming a database the server does not have is a setup mistake, not
// an outage: Open says so, how to create the database, and is not
// STORE_UNAVAILABLE (which tells callers to retry). Creating the database as
// the message says makes the same URL open.
func TestOpenMissingDatabase(t *testing.T) {
	url := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminConn(t)
	name := pgx.Identifier{cfg.Database}.Sanitize()
	if _, err := admin.Exec(t.Context(), "DROP DATABASE "+name); err != nil {
		t.Fatal(err)
	}

	s, err := pgstore.Open(t.Context(), url, idem.StoreConfig{})
	var missing *pgstore.MissingDatabaseError
	if !errors.As(err, &missing) {
		t.Fatalf("Open of a dropped database: %v, %v; want a *pgstore.MissingDatabaseError", s, err)
	}
	if errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("Open of a dropped database is STORE_UNAVAILABLE (%v): retrying cannot create a database", err)
	}
	if missing.Database != cfg.Database || missing.Host != cfg.Host || missing.Port != cfg.Port || missing.User != cfg.User {
		t.Errorf("error names database %q on %s:%d as %s; want %q on %s:%d as %s",
			missing.Database, missing.Host, missing.Port, missing.User, cfg.Database, cfg.Host, cfg.Port, cfg.User)
	}
	msg := err.Error()
	for _, want := range []string{
		fmt.Sprintf("database %q does not exist on %s:%d", cfg.Database, cfg.Host, cfg.Port),
		fmt.Sprintf("createdb -h %s -p %d -U %s %s", cfg.Host, cfg.Port, cfg.User, cfg.Database),
		"CREATE DATABASE " + name + ";",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "STORE_UNAVAILABLE") || strings.Contains(msg, "retry") {
		t.Errorf("message %q tells to retry", msg)
	}

	// The advice works.
	if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	s, err = pgstore.Open(t.Context(), url, idem.StoreConfig{})
	if err != nil {
		t.Fatalf("Open after CREATE DATABASE %s: %v", name, err)
	}
	s.Close()
}

// The commands in the message survive names that need quoting.
func TestMissingDatabaseMessageQuotes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  pgstore.MissingDatabaseError
		want []string
	}{
		{"plain", pgstore.MissingDatabaseError{Database: "idem", Host: "db.example.com", Port: 5432, User: "app"},
			[]string{`database "idem" does not exist on db.example.com:5432`, "createdb -h db.example.com -p 5432 -U app idem", `CREATE DATABASE "idem";`}},
		{"mixed case and space", pgstore.MissingDatabaseError{Database: "My DB", Host: "127.0.0.1", Port: 5432, User: "o'neil"},
			[]string{`database "My DB" does not exist`, `createdb -h 127.0.0.1 -p 5432 -U 'o'\''neil' 'My DB'`, `CREATE DATABASE "My DB";`}},
		{"quote in the name", pgstore.MissingDatabaseError{Database: `a"b`, Host: "::1", Port: 5433, User: "idem"},
			[]string{`on [::1]:5433`, `-U idem 'a"b'`, `CREATE DATABASE "a""b";`}},
		{"socket directory", pgstore.MissingDatabaseError{Database: "idem", Host: "/var/run/postgresql", Port: 5432, User: "idem"},
			[]string{"createdb -h /var/run/postgresql -p 5432 -U idem idem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
}

// A role the server does not admit is a setup mistake too: Open names the
// role and what to fix, and is not STORE_UNAVAILABLE.
func TestOpenRefusedRole(t *testing.T) {
	url := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	bad := fmt.Sprintf("postgres://no_such_role_idem@%s:%d/%s?sslmode=disable", cfg.Host, cfg.Port, cfg.Database)
	_, err = pgstore.Open(t.Context(), bad, idem.StoreConfig{})
	var refused *pgstore.LoginRefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("Open as a role that does not exist: %v; want a *pgstore.LoginRefusedError", err)
	}
	if errors.Is(err, idem.ErrStoreUnavailable) || refused.User != "no_such_role_idem" || !strings.HasPrefix(refused.Err.Code, "28") {
		t.Fatalf("Open as a role that does not exist: %+v (%v)", refused, err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"no_such_role_idem"`) || !strings.Contains(msg, "CREATE ROLE") || strings.Contains(msg, "retry") {
		t.Fatalf("the message does not say what to fix: %s", msg)
	}
}
