//go:build unix

package client

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes flock on f, exclusive or shared, waiting for it. flock
// locks belong to the open file description, so two opens of the journal,
// in one process or two, exclude each other.
func lockFile(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("lock the journal: %w", err)
		}
		return nil
	}
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
