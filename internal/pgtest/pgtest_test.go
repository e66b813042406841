package pgtest

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestNewDatabase(t *testing.T) {
	admin := URL(t)
	var dbURL, name string

	// The subtest's cleanup drops the database before we look for it below.
	t.Run("fresh", func(t *testing.T) {
		dbURL = NewDatabase(t)
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatalf("connect to new database: %v", err)
		}
		// Left open on purpose: the drop must force it closed.
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, namePrefix+"testnewdatabase_fresh_") {
			t.Errorf("database name %q does not follow the test name", name)
		}
		var relations int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
			  AND n.nspname NOT LIKE 'pg_toast%'`).Scan(&relations); err != nil {
			t.Fatal(err)
		}
		if relations != 0 {
			t.Errorf("new database has %d user relations, want 0", relations)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
			t.Errorf("new database is not writable: %v", err)
		}
	})
	if name == "" {
		t.Fatal("subtest did not report a database name")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after cleanup", name)
	}
}

func TestNewDatabaseParallel(t *testing.T) {
	URL(t)
	seen := make(chan string, 8)
	t.Run("group", func(t *testing.T) {
		for i := range cap(seen) {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				u := NewDatabase(t)
				conn, err := pgx.Connect(context.Background(), u)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(context.Background())
				var name string
				if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
					t.Fatal(err)
				}
				seen <- name
			})
		}
	})
	close(seen)
	names := map[string]bool{}
	for n := range seen {
		if names[n] {
			t.Errorf("database name %s handed out twice", n)
		}
		names[n] = true
	}
}

var validName = regexp.MustCompile(`^idem_test_[a-z0-9]+(_[a-z0-9]+)*_[0-9a-f]{16}$`)

func TestDatabaseName(t *testing.T) {
	for _, in := range []string{
		"TestX",
		"TestStore/Put_then_Get/#01",
		"Test Ünïcode ☃ & \"quotes\"; DROP DATABASE x",
		"///",
		"",
		strings.Repeat("TestAVeryLongName/", 20),
	} {
		a, b := databaseName(in), databaseName(in)
		if !validName.MatchString(a) || len(a) > maxNameLen {
			t.Errorf("databaseName(%q) = %q (len %d): not a safe identifier", in, a, len(a))
		}
		if a == b {
			t.Errorf("databaseName(%q) returned %q twice", in, a)
		}
	}
	if got := databaseName("TestStore/Put_then_Get"); !strings.HasPrefix(got, "idem_test_teststore_put_then_get_") {
		t.Errorf("databaseName kept too little of the test name: %q", got)
	}
}

func TestWithDatabase(t *testing.T) {
	for _, admin := range []string{
		"postgres://idem@127.0.0.1:5432/postgres?sslmode=disable",
		"postgresql://u:p%40ss@db.example:6543/?sslmode=disable&dbname=other",
		"host=127.0.0.1 port=5432 user=idem dbname=postgres sslmode=disable",
	} {
		got, err := withDatabase(admin, "idem_test_x_0123")
		if err != nil {
			t.Fatalf("withDatabase(%q): %v", admin, err)
		}
		want, err := pgx.ParseConfig(admin)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil {
			t.Fatalf("withDatabase(%q) = %q: %v", admin, got, err)
		}
		if cfg.Database != "idem_test_x_0123" {
			t.Errorf("withDatabase(%q) = %q: database %q", admin, got, cfg.Database)
		}
		if cfg.Host != want.Host || cfg.Port != want.Port || cfg.User != want.User || cfg.Password != want.Password {
			t.Errorf("withDatabase(%q) = %q: changed more than the database", admin, got)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of acting on
// the real test. Both end the calling goroutine, like the real ones.
type recorder struct {
	testing.TB
	skipped, fatal string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestSkipOrFail(t *testing.T) {
	cases := []struct {
		name, url, require string
		f                  func(testing.TB)
		wantSkip, wantFail string // substrings; "" means must not happen
	}{
		{"URL/unset", "", "", func(t testing.TB) { URL(t) }, EnvURL + " is not set", ""},
		{"URL/unset/required", "", "1", func(t testing.TB) { URL(t) }, "", "make test"},
		{"URL/set/required", "postgres://x@h/d", "1", func(t testing.TB) { URL(t) }, "", ""},
		{"NewDatabase/unset", "", "", func(t testing.TB) { NewDatabase(t) }, EnvURL + " is not set", ""},
		{"NewDatabase/unset/required", "", "1", func(t testing.TB) { NewDatabase(t) }, "", EnvURL + "=postgres://"},
		// Port 1 on loopback refuses at once.
		{"NewDatabase/unreachable", "postgres://x@127.0.0.1:1/d?sslmode=disable&connect_timeout=5", "", func(t testing.TB) { NewDatabase(t) }, "cannot connect", ""},
		{"NewDatabase/unreachable/required", "postgres://x@127.0.0.1:1/d?sslmode=disable&connect_timeout=5", "1", func(t testing.TB) { NewDatabase(t) }, "", "127.0.0.1:1"},
		{"NewDatabase/malformed", "postgres://x@h:notaport/d", "", func(t testing.TB) { NewDatabase(t) }, "", "parse " + EnvURL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvURL, c.url)
			t.Setenv(EnvRequire, c.require)
			r := run(t, c.f)
			check := func(what, got, want string) {
				if want == "" && got != "" {
					t.Errorf("unexpected %s: %s", what, got)
				}
				if want != "" && !strings.Contains(got, want) {
					t.Errorf("%s = %q, want it to contain %q", what, got, want)
				}
			}
			check("skip", r.skipped, c.wantSkip)
			check("fatal", r.fatal, c.wantFail)
		})
	}
}
