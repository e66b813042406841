//go:build unix

package sqlitestore

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// wOK is access(2)'s W_OK.
const wOK = 2

// checkWritable says, before anything is created, whether the database
// file (when it exists) or its directory cannot be written: SQLite
// itself would say only "attempt to write a readonly database". The
// directory must be writable too, for the -wal and -shm files. It asks
// access(2), which opens nothing: closing a descriptor of the file would
// drop the POSIX locks SQLite holds on it in this process.
func checkWritable(path, dir string) error {
	switch err := syscall.Access(path, wOK); {
	case err == nil, errors.Is(err, fs.ErrNotExist):
	default:
		return fmt.Errorf("sqlitestore: open %s: the database file is not writable by this process (%w): make it writable (chmod u+w %s, or as its owner), or give another path", path, err, path)
	}
	if err := syscall.Access(dir, wOK); err != nil {
		return fmt.Errorf("sqlitestore: open %s: its directory %s is not writable by this process (%w): SQLite writes the database and its -wal and -shm files there; make the directory writable, or give a path in one that is", path, dir, err)
	}
	return nil
}
