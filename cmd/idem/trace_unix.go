//go:build unix

package main

import (
	"os"
	"syscall"
)

// traceSignal asks IDEM_TRACE's flight recorder for its window.
var traceSignal os.Signal = syscall.SIGUSR1
