// Command idem serves, calls and maintains idem operations.
//
// This file wires the process to Main; every subcommand lives in a file of
// its own and is testable through Main.Run.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	endProfile := startProfile(os.Getenv("IDEM_CPUPROFILE"))
	endBlock := startContentionProfile("block", os.Getenv("IDEM_BLOCKPROFILE"))
	endMutex := startContentionProfile("mutex", os.Getenv("IDEM_MUTEXPROFILE"))
	endTrace := startTrace(os.Getenv("IDEM_TRACE"))
	code := Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}.Run(ctx, os.Args[1:])
	endProfile()
	endBlock()
	endMutex()
	endTrace()
	writeProfile("allocs", "IDEM_ALLOCPROFILE", os.Getenv("IDEM_ALLOCPROFILE"))
	stop()
	os.Exit(code)
}

// startProfile writes a CPU profile of the whole run to path, "%p"
// replaced by the process id (so that several servers of one benchmark
// write apart), when path is set: IDEM_CPUPROFILE, for docs/PERFORMANCE.md.
// It returns the function that ends the profile.
func startProfile(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "idem: IDEM_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// startContentionProfile records the process's blocking events (kind
// "block": channel, select, mutex and sync.Cond waits of 10 µs or more,
// sampled by duration) or its contended mutexes (kind "mutex": one event
// in 10), when path is set: IDEM_BLOCKPROFILE and IDEM_MUTEXPROFILE, for
// docs/PERFORMANCE.md's tail analysis. The returned function writes the
// profile at the end of the run.
func startContentionProfile(kind, path string) func() {
	if path == "" {
		return func() {}
	}
	if kind == "block" {
		runtime.SetBlockProfileRate(10_000)
	} else {
		runtime.SetMutexProfileFraction(10)
	}
	return func() { writeProfile(kind, "IDEM_"+strings.ToUpper(kind)+"PROFILE", path) }
}

// writeProfile writes pprof's profile kind to path ("%p" replaced by the
// process id) when path is set; env names the variable that set it. The
// "allocs" profile is the allocations of the whole run (go tool pprof
// -sample_index=alloc_space): IDEM_ALLOCPROFILE, for docs/PERFORMANCE.md.
func writeProfile(kind, env, path string) {
	if path == "" {
		return
	}
	f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
	if err == nil {
		err = pprof.Lookup(kind).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "idem: %s: %v\n", env, err)
	}
}

// writeHeapProfile writes a heap profile to path ("%p" replaced by the
// process id) after a collection, when path is set: IDEM_HEAPPROFILE,
// which idem serve and idem proxy write once they listen, so that the
// profile shows what the declarations hold (docs/PERFORMANCE.md).
func writeHeapProfile(path string, stderr io.Writer) {
	if path == "" {
		return
	}
	f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
	if err == nil {
		runtime.GC()
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "idem: IDEM_HEAPPROFILE: %v\n", err)
	}
}

// Main is one run of the idem command, with its environment injected so
// that tests can drive it.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// Exit codes (SPEC §10.3).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// Run runs the command line args and returns the process exit code.
func (m Main) Run(ctx context.Context, args []string) int {
	root := m.rootCommand()
	root.SetArgs(args)
	root.SetIn(m.Stdin)
	root.SetOut(m.Stdout)
	root.SetErr(m.Stderr)
	if cmd, err := root.ExecuteContextC(ctx); err != nil {
		return m.report(cmd, err)
	}
	return exitOK
}
