//go:build linux

package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/sqlitestore"
)

// readOnly makes path unwritable for this process until the test ends:
// mode 0555/0444, or, for root, whom modes do not stop, the immutable
// attribute (skipping where the file system has none).
func readOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
			t.Skipf("chattr +i %s: %v %s (root needs the immutable attribute to make a file read-only)", path, err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, fi.Mode().Perm()&^0o222); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(path, fi.Mode().Perm()) })
}

// A database file or a directory that cannot be written is refused at
// Open, naming the path and which of the two to fix, before anything is
// created, instead of SQLite's "attempt to write a readonly database".
func TestOpenReadOnly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing bool   // the database file exists (made by an earlier Open)
		lock     string // "dir" or "file"
		want     string
	}{
		{"new file in a read-only directory", false, "dir", "its directory DIR is not writable"},
		{"existing file in a read-only directory", true, "dir", "its directory DIR is not writable"},
		{"read-only file", true, "file", "the database file is not writable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "idem.db")
			if tc.existing {
				s, err := sqlitestore.Open(t.Context(), path, idem.StoreConfig{})
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
			}
			before := entries(t, dir)
			if tc.lock == "dir" {
				readOnly(t, dir)
			} else {
				readOnly(t, path)
			}
			s, err := sqlitestore.Open(t.Context(), path, idem.StoreConfig{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			if !strings.Contains(msg, path) || !strings.Contains(msg, want) || strings.Contains(msg, "readonly database") {
				t.Errorf("Open: %q; want the path %s and %q", msg, path, want)
			}
			if after := entries(t, dir); after != before {
				t.Errorf("Open left %q in the directory, had %q", after, before)
			}
		})
	}
}

func entries(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// A write to a database whose file became read-only after Open, or whose
// space ran out, fails as STORE_UNAVAILABLE with a cause naming the database's path
// and what to check, not only SQLite's "disk I/O error (778)" or "database
// or disk is full (13)" (issue 37 item 3). The message the
// caller is sent does not carry the server's path.
func TestWriteAfterFileBroken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		brk   func(t *testing.T, path string)
		check string
	}{
		{"file made read-only", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("a mode does not stop the descriptors SQLite already holds; only the immutable attribute, which needs root, does")
			}
			readOnly(t, path)
			readOnly(t, path+"-wal")
		}, "writable by this process"},
		{"database full", nil, "full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "idem.db")
			s, err := sqlitestore.Open(t.Context(), path, idem.StoreConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			exec := func(q string) error {
				return s.Write(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, q)
					return err
				})
			}
			if err := exec(`CREATE TABLE app_rows (n INTEGER PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			insert := `INSERT INTO app_rows VALUES (1)`
			if tc.brk != nil {
				tc.brk(t, path)
			} else {
				// SQLITE_FULL without filling a disk: cap the writer's
				// file at its present size, then grow it.
				if err := exec(`PRAGMA max_page_count = 1`); err != nil {
					t.Fatal(err)
				}
				insert = `WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 100000) INSERT INTO app_rows SELECT n FROM c`
			}
			err = exec(insert)
			var e *idem.Error
			if !errors.As(err, &e) || e.Code != idem.CodeStoreUnavailable {
				t.Fatalf("write: %v; want STORE_UNAVAILABLE", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "SQLite database "+path+":") || !strings.Contains(msg, tc.check) {
				t.Errorf("write: %q; want the path %s and %q", msg, path, tc.check)
			}
			if strings.Contains(e.Message, path) {
				t.Errorf("the message sent to callers names the server's path: %q", e.Message)
			}
			t.Log(err)
		})
	}
}
