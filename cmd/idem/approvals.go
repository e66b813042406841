package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
)

func (m Main) approvalsCommand() *cobra.Command {
	var o remoteOptions
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List, show and decide approvals",
		Long: "Approvals bind an operation, its requester and the exact input (its fingerprint). The requester\n" +
			"sees its own; approvers see every approval of their org and decide them. After an approval,\n" +
			"the requester re-sends the same intent (same command, same key) and it executes once.",
		Args: cobra.NoArgs,
	}
	o.addFlags(cmd, true)

	var status string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the approvals visible to the caller (GET /v1/approvals)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := m.session(o)
			if err != nil {
				return err
			}
			a, err := s.client.Approvals(cmd.Context(), status)
			if err != nil {
				return s.fail(err, nil)
			}
			return s.succeed(a.Body, func(w io.Writer) { approvalsTable(w, a.Data) })
		},
	}
	list.Flags().StringVar(&status, "status", "", "only approvals in this status: pending, approved, rejected, consumed or expired")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one approval (GET /v1/approvals/{id})",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m.session(o)
			if err != nil {
				return err
			}
			a, err := s.client.Approval(cmd.Context(), args[0])
			if err != nil {
				return s.fail(err, nil)
			}
			return s.succeed(a.Body, func(w io.Writer) { approvalTable(w, a.Data) })
		},
	}
	cmd.AddCommand(list, show, m.decideCommand(&o, true), m.decideCommand(&o, false))
	return cmd
}

// decideCommand is idem approvals approve or reject.
func (m Main) decideCommand(o *remoteOptions, approve bool) *cobra.Command {
	verb, route := "reject", "POST /v1/approvals/{id}/reject"
	if approve {
		verb, route = "approve", "POST /v1/approvals/{id}/approve"
	}
	var reason string
	cmd := &cobra.Command{
		Use:   verb + " ID",
		Short: fmt.Sprintf("%s an approval (%s); needs the approver role", titleCase(verb), route),
		Long: fmt.Sprintf("%s an approval. Repeating the decision it already carries returns it unchanged; the other\n"+
			"decision on a decided approval answers 409 APPROVAL_ALREADY_DECIDED. Not retried automatically.", titleCase(verb)),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m.session(*o)
			if err != nil {
				return err
			}
			decide := s.client.Reject
			if approve {
				decide = s.client.Approve
			}
			a, err := decide(cmd.Context(), args[0], reason)
			if err != nil {
				return s.fail(err, nil)
			}
			if approve && a.Data.Status == idem.ApprovalApproved {
				fmt.Fprintf(m.Stderr, "Approved: the requester (%s) now re-sends the same %s request to execute it once.\n", a.Data.RequestedBy, a.Data.Operation)
			}
			return s.succeed(a.Body, func(w io.Writer) { approvalTable(w, a.Data) })
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded as the decision reason)")
	return cmd
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

func approvalsTable(w io.Writer, list []idem.Approval) {
	fmt.Fprintln(w, "ID\tSTATUS\tOPERATION\tREQUESTED BY\tCREATED\tEXPIRES\tRULE\tREASON\tINPUT")
	for _, a := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Status, a.Operation, a.RequestedBy,
			timeString(a.CreatedAt), timeString(a.ExpiresAt), dash(a.Rule), dash(a.Reason), dash(shortInput(a.Input)))
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "(no approvals)")
	}
}

func approvalTable(w io.Writer, a idem.Approval) {
	kv(w, "id", a.ID, "status", string(a.Status), "operation", a.Operation, "requested by", a.RequestedBy,
		"rule", dash(a.Rule), "reason", a.Reason, "decided by", strPtr(a.DecidedBy), "decision reason", strPtr(a.DecisionReason),
		"fingerprint", a.Fingerprint, "created", timeString(a.CreatedAt), "expires", timeString(a.ExpiresAt),
		"decided", timePtr(a.DecidedAt), "consumed", timePtr(a.ConsumedAt), "execution", strPtr(a.ExecutionID))
	if len(a.Input) > 0 {
		fmt.Fprintf(w, "input\n  %s\n", indentJSON(a.Input, "  "))
	}
}

// shortInput is an approval's input on one line, cut to fit a table.
func shortInput(input []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, input) != nil {
		return ""
	}
	const max = 60
	if r := []rune(b.String()); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return b.String()
}
