//go:build unix

package sqlitestore_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/sqlitestore"
)

// A new database file and its -wal and -shm files are 0600, whatever the
// umask lets through; an existing file keeps its mode.
func TestDatabaseFilesAreCreated0600(t *testing.T) {
	old := syscall.Umask(0o022) // the usual umask, under which SQLite alone creates 0644
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "idem.db")
	s, err := sqlitestore.Open(t.Context(), path, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", filepath.Base(name), got)
		}
	}

	existing := filepath.Join(dir, "existing.db")
	if err := os.WriteFile(existing, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	s2, err := sqlitestore.Open(t.Context(), existing, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if fi, err := os.Stat(existing); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("existing file: %v, %v; want its mode 0640 kept", fi.Mode(), err)
	}
}
