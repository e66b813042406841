// Command idem serves, calls and maintains idem operations.
//
// This file wires the process to Main; every subcommand lives in a file of
// its own and is testable through Main.Run.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
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
	if err := root.ExecuteContext(ctx); err != nil {
		return m.report(err)
	}
	return exitOK
}
