// Package sqlitetest breaks SQLite databases for outage tests.
package sqlitetest

import (
	"os"
	"testing"
)

// Destroy overwrites the database file at path, its WAL and its
// shared-memory index with zeros in place, as a failed disk would leave
// them. Every statement of every connection open on the file then fails
// (the file is no longer a database), without waiting. The files keep
// their size: SQLite maps the shared-memory file, and shrinking it under
// the mapping would crash.
func Destroy(t testing.TB, path string) {
	t.Helper()
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, fi.Size()), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
