package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
)

func (m Main) attemptsCommand() *cobra.Command {
	var o remoteOptions
	cmd := &cobra.Command{
		Use:   "attempts",
		Short: "Show the caller's attempt records",
		Args:  cobra.NoArgs,
	}
	o.addFlags(cmd, true)
	cmd.AddCommand(&cobra.Command{
		Use:   "show KEY",
		Short: "Show the caller's attempt record for an idempotency key (GET /v1/attempts/{key})",
		Long: "Show the attempt record of KEY in the caller's scope: its state (in_flight, completed,\n" +
			"indeterminate, expired), fingerprint, execution, stored status and timestamps. The key travels\n" +
			"percent-encoded (/ as %2F). A key with no record answers 404 NOT_FOUND.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m.session(o)
			if err != nil {
				return err
			}
			a, err := s.client.Attempt(cmd.Context(), args[0])
			if err != nil {
				return s.fail(err, nil)
			}
			return s.succeed(a.Body, func(w io.Writer) { attemptTable(w, a.Data) })
		},
	})
	return cmd
}

func attemptTable(w io.Writer, a idem.AttemptView) {
	status := ""
	if a.Status != nil {
		status = fmt.Sprint(*a.Status)
	}
	kv(w, "key", a.Key, "operation", a.Operation, "state", string(a.State), "fingerprint", a.Fingerprint,
		"execution", a.ExecutionID, "status", status, "created", timeString(a.CreatedAt),
		"completed", timePtr(a.CompletedAt), "forgotten at", timeString(a.ExpiresAt), "secret expires", timePtr(a.SecretExpiresAt))
}
