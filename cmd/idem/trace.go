package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// startTrace keeps a Go execution trace of the process's last seconds in
// memory (runtime/trace's flight recorder), when path is set:
// IDEM_TRACE, for docs/PERFORMANCE.md's tail analysis. Each SIGUSR1
// writes the window to path ("%p" replaced by the process id, "%n" by the
// signal's count, from 1; on systems without SIGUSR1 only the end of the
// run writes); so does the end of the run. Read it with
// go tool trace. The returned function writes the last window and stops.
func startTrace(path string) func() {
	if path == "" {
		return func() {}
	}
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: 5 * time.Second, MaxBytes: 256 << 20})
	if err := fr.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "idem: IDEM_TRACE: %v\n", err)
		return func() {}
	}
	n := 0
	write := func() {
		n++
		name := strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
		f, err := os.Create(strings.ReplaceAll(name, "%n", strconv.Itoa(n)))
		if err == nil {
			_, err = fr.WriteTo(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "idem: IDEM_TRACE: %v\n", err)
		}
	}
	sig := make(chan os.Signal, 1)
	if traceSignal != nil {
		signal.Notify(sig, traceSignal)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range sig {
			write()
		}
	}()
	return func() {
		signal.Stop(sig)
		close(sig)
		<-done
		write()
		fr.Stop()
	}
}
