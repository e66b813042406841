package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// usageError marks a command line the user must fix (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func (m Main) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "idem",
		Short:         "Safe, honest retries for agent and automation calls",
		Long:          "idem declares operations once and serves them with enforced idempotency keys, retry contracts, approvals and an audit trail.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(m.versionCommand(), m.migrateCommand(), m.serveCommand(), m.proxyCommand(), m.gatewayCommand(), m.keyCommand(), m.webhookCommand(), m.mcpCommand())
	root.AddCommand(m.operationsCommand(), m.callCommand(), m.approvalsCommand(), m.executionsCommand(), m.attemptsCommand())
	root.AddCommand(m.catalogCommand(), m.policyCommand())
	return root
}

// report prints err for people on stderr and returns its exit code.
func (m Main) report(err error) int {
	var done exitStatus
	if errors.As(err, &done) { // the command has said everything already
		return int(done)
	}
	fmt.Fprintf(m.Stderr, "Error: %v\n", err)
	var usage usageError
	if errors.As(err, &usage) || isCobraUsage(err) {
		fmt.Fprintln(m.Stderr, "Run 'idem --help' for usage.")
		return exitUsage
	}
	return exitError
}

// isCobraUsage recognises cobra's own argument errors, which it returns
// as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "required flag"} {
		if len(msg) >= len(prefix) && msg[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
