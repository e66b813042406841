//go:build !unix

package client

import (
	"errors"
	"os"
)

// lockFile is unsupported here: the file journal relies on flock.
func lockFile(*os.File, bool) error {
	return errors.New("the file journal needs flock, available on unix systems only")
}

func unlockFile(*os.File) {}
