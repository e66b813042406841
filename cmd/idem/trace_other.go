//go:build !unix

package main

import "os"

// traceSignal: none here; IDEM_TRACE writes its window at the end of the run.
var traceSignal os.Signal
