package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
)

// run runs idem with args and an empty environment except env.
func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }}
	code = m.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "idem ") || !strings.Contains(out, "go1.") {
		t.Fatalf("idem version = %d %q", code, out)
	}
}

// Usage errors point to the failing command's help, and a mistyped
// subcommand or flag gets a suggestion.
func TestUsageErrorsSuggest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"serv"}, []string{"Did you mean this?\n\tserve", "Run 'idem --help' for usage."}},
		{[]string{"serve", "--adr", "x"}, []string{"unknown flag: --adr; did you mean --addr?", "Run 'idem serve --help' for usage."}},
		{[]string{"migrate", "--store-connect", "1s"}, []string{"did you mean --store-connect-timeout?", "Run 'idem migrate --help' for usage."}},
		{[]string{"approvals", "show"}, []string{"Run 'idem approvals show --help' for usage."}},
		{[]string{"approvals", "lst"}, []string{`unknown command "lst" for "idem approvals"`, "Did you mean this?\n\tlist", "Run 'idem approvals --help' for usage."}},
	} {
		code, _, stderr := run(t, nil, tc.args...)
		if code != exitUsage {
			t.Errorf("idem %v = exit %d, want 2", tc.args, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("idem %v: stderr %q lacks %q", tc.args, stderr, w)
			}
		}
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{{"no-such-command"}, {"version", "extra"}, {"migrate", "--no-such-flag"}, {"migrate", "--store", "mysql://x"}} {
		if code, _, stderr := run(t, nil, args...); code != exitUsage || !strings.Contains(stderr, "Error:") {
			t.Errorf("idem %v = exit %d, stderr %q; want exit 2 with an error", args, code, stderr)
		}
	}
}

// idem migrate says which migrations it applied, then that the schema is
// up to date.
func TestMigrateSQLiteTwice(t *testing.T) {
	url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	for i, want := range []string{"applied 001_init, 002_", "schema up to date"} {
		code, out, stderr := run(t, nil, "migrate", "--store", url)
		if code != 0 || !strings.HasPrefix(out, want) {
			t.Fatalf("run %d: idem migrate = exit %d, out %q, err %q; want %q", i+1, code, out, stderr, want)
		}
	}
}

// sqlite://PATH, a likely slip, is a usage error that suggests sqlite:PATH
// and shows no driver connection string.
func TestMigrateSQLiteSlashes(t *testing.T) {
	code, out, stderr := run(t, nil, "migrate", "--store", "sqlite://h37-never.db")
	if code != exitUsage || !strings.Contains(stderr, "--store sqlite:h37-never.db") || strings.Contains(stderr, "file:") || strings.Contains(stderr, "_pragma") {
		t.Fatalf("idem migrate --store sqlite://… = exit %d, out %q, err %q; want exit 2 suggesting sqlite:h37-never.db", code, out, stderr)
	}
}

// A PostgreSQL store that accepts the connection and never answers fails
// within --store-connect-timeout, naming the host and port.
func TestMigrateSilentPostgres(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	addr := ln.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	m := Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code := m.Run(ctx, []string{"migrate", "--store", "postgres://idem@" + addr + "/app?sslmode=disable", "--store-connect-timeout", "100ms"})
	if ctx.Err() != nil {
		t.Fatalf("idem migrate waited for the test's deadline: exit %d, err %q", code, errOut.String())
	}
	if code != exitError || !strings.Contains(errOut.String(), "no answer from PostgreSQL at "+addr) {
		t.Fatalf("idem migrate against a silent server = exit %d, err %q; want exit 1 naming %s", code, errOut.String(), addr)
	}
}

func TestMigrateFromEnvironment(t *testing.T) {
	url := "sqlite:" + filepath.Join(t.TempDir(), "env.db")
	code, out, stderr := run(t, map[string]string{"IDEM_STORE": url}, "migrate")
	if code != 0 || !strings.Contains(out, url) {
		t.Fatalf("idem migrate with IDEM_STORE = exit %d, out %q, err %q", code, out, stderr)
	}
}

func TestMigratePostgresTwice(t *testing.T) {
	url := pgtest.NewDatabase(t)
	for i, want := range []string{"applied 001_", "schema up to date"} {
		code, out, stderr := run(t, nil, "migrate", "--store", url)
		if code != 0 || !strings.HasPrefix(out, want) {
			t.Fatalf("run %d: idem migrate = exit %d, out %q, err %q; want %q", i+1, code, out, stderr, want)
		}
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://idem:secret@127.0.0.1:5432/db", "postgres://idem:***@127.0.0.1:5432/db"},
		{"postgres://idem@127.0.0.1/db", "postgres://idem@127.0.0.1/db"},
		{"sqlite:idem.db", "sqlite:idem.db"},
	}
	for _, tt := range tests {
		if got := redact(tt.in); got != tt.want {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestKeyNew(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		code, out, _ := run(t, nil, "key", "new")
		key := strings.TrimSuffix(out, "\n")
		if code != 0 || strings.Count(out, "\n") != 1 || len(key) != 36 || seen[key] {
			t.Fatalf("idem key new = %d %q", code, out)
		}
		if err := idem.ValidateKey(key); err != nil {
			t.Fatalf("idem key new printed an invalid key %q: %v", key, err)
		}
		seen[key] = true
	}
}

func TestServeRefusesAMalformedAllowedOrigin(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
	}{
		"flag":        {nil, []string{"serve", "--allowed-origins", "https://ok.example,ftp://x"}},
		"environment": {map[string]string{"IDEM_ALLOWED_ORIGINS": "app.example.com"}, []string{"serve"}},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := run(t, tc.env, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, "--allowed-origins") {
				t.Fatalf("idem %v = exit %d, stderr %q; want exit 2 naming --allowed-origins", tc.args, code, stderr)
			}
		})
	}
}

// A retention that does not outlive the leases (here 2 s, when
// order.refund alone holds its lease for 15 s) is refused at start-up,
// naming the flags, before anything listens.
func TestServeRefusesRetentionShorterThanLeases(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--retention", "2s"},
		{"--retention", "36s"}, // the longest lease (35 s) plus the margin, not more
		{"--retention", "40s", "--lease-grace", "10s"},
	} {
		all := append([]string{"serve", "--demo", "--addr", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(dir, "idem.db"),
			"--secret-key-file", filepath.Join(dir, "idem.key")}, args...)
		code, _, stderr := run(t, nil, all...)
		if code != exitUsage || !strings.Contains(stderr, "--retention") || !strings.Contains(stderr, "--lease-grace") || strings.Contains(stderr, "listening") {
			t.Errorf("idem serve %v = exit %d, stderr %q; want exit %d naming --retention and --lease-grace", args, code, stderr, exitUsage)
		}
	}
}

// An audit retention shorter than the attempt retention (or none) is
// refused at start-up, naming both flags, before anything listens; one as
// long is accepted.
func TestServeRefusesAuditRetentionShorterThanRetention(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--audit-retention", "23h"},
		{"--audit-retention", "0s"},
		{"--retention", "200h"}, // beyond the default audit retention, 168h
		{"--retention", "48h", "--audit-retention", "47h59m59s"},
	} {
		all := append([]string{"serve", "--demo", "--addr", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(dir, "idem.db"),
			"--secret-key-file", filepath.Join(dir, "idem.key")}, args...)
		code, _, stderr := run(t, nil, all...)
		if code != exitUsage || !strings.Contains(stderr, "--audit-retention") || !strings.Contains(stderr, "--retention ") || strings.Contains(stderr, "listening") {
			t.Errorf("idem serve %v = exit %d, stderr %q; want exit %d naming --audit-retention and --retention", args, code, stderr, exitUsage)
		}
	}
	if out := serveUntilListening(t, "--retention", "48h", "--audit-retention", "48h"); !strings.Contains(out, "listening on ") {
		t.Fatalf("an audit retention equal to the retention was refused:\n%s", out)
	}
}
