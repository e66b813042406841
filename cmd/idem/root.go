package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idem-run/idem/internal/suggest"
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
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{suggestFlag(cmd, err)} })
	root.AddCommand(m.versionCommand(), m.migrateCommand(), m.serveCommand(), m.proxyCommand(), m.gatewayCommand(), m.keyCommand(), m.webhookCommand(), m.mcpCommand())
	root.AddCommand(m.operationsCommand(), m.callCommand(), m.approvalsCommand(), m.executionsCommand(), m.attemptsCommand())
	root.AddCommand(m.catalogCommand(), m.policyCommand())
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command that only groups others
// (idem approvals, idem key, …) refuse an unknown subcommand as the root
// does, with cobra's suggestions, instead of printing its help and exiting
// 0; without arguments it still prints its help.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !cmd.HasParent() || cmd.Runnable() || !cmd.HasSubCommands() {
		return
	}
	cmd.Args, cmd.SuggestionsMinimumDistance = cobra.ArbitraryArgs, 2
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if near := c.SuggestionsFor(args[0]); len(near) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(near, "\n\t") + "\n"
		}
		return usageError{errors.New(msg)}
	}
}

// report prints err for people on stderr and returns its exit code. cmd
// is the command that failed (nil: the root), whose help a usage error
// points to.
func (m Main) report(cmd *cobra.Command, err error) int {
	var done exitStatus
	if errors.As(err, &done) { // the command has said everything already
		return int(done)
	}
	fmt.Fprintf(m.Stderr, "Error: %v\n", err)
	var usage usageError
	if errors.As(err, &usage) || isCobraUsage(err) {
		path := "idem"
		if cmd != nil {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(m.Stderr, "Run '%s --help' for usage.\n", path)
		return exitUsage
	}
	return exitError
}

// suggestFlag adds "did you mean --NAME?" to an unknown flag's error when
// one of cmd's flags is a likely slip for it.
func suggestFlag(cmd *cobra.Command, err error) error {
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		return err
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if near := suggest.Closest(name, names); near != "" {
		return fmt.Errorf("%w; did you mean --%s?", err, near)
	}
	return err
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
