package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
)

func (m Main) executionsCommand() *cobra.Command {
	var o remoteOptions
	cmd := &cobra.Command{
		Use:   "executions",
		Short: "Show executions and their audit events",
		Args:  cobra.NoArgs,
	}
	o.addFlags(cmd, true)
	cmd.AddCommand(&cobra.Command{
		Use:   "show ID",
		Short: "Show an execution with its audit events (GET /v1/executions/{id})",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := m.session(o)
			if err != nil {
				return err
			}
			x, err := s.client.Execution(cmd.Context(), args[0])
			if err != nil {
				return s.fail(err, nil)
			}
			return s.succeed(x.Body, func(w io.Writer) { executionTable(w, x.Data) })
		},
	})
	return cmd
}

func executionTable(w io.Writer, x idem.Execution) {
	code := ""
	if x.Code != nil {
		code = string(*x.Code)
	}
	kv(w, "id", x.ID, "operation", x.Operation, "principal", x.Principal, "attempts", fmt.Sprint(x.Attempts),
		"outcome", string(x.Outcome), "code", code, "reinvocation of", strPtr(x.ReinvocationOf),
		"started", timeString(x.StartedAt), "finished", timePtr(x.FinishedAt))
	if len(x.Events) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "AT\tEVENT\tATTEMPT\tCODE\tDETAILS")
	for _, e := range x.Events {
		attempt := ""
		if e.Attempt > 0 {
			attempt = fmt.Sprint(e.Attempt)
		}
		c := string(e.Code)
		if e.PreviousErrorCode != "" {
			c = "after " + string(e.PreviousErrorCode)
		}
		var details []string
		if e.Attempts > 0 {
			details = append(details, fmt.Sprintf("attempts=%d", e.Attempts))
		}
		if e.DurationMs > 0 {
			details = append(details, fmt.Sprintf("durationMs=%d", e.DurationMs))
		}
		keys := make([]string, 0, len(e.Data))
		for k := range e.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			details = append(details, k+"="+e.Data[k])
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", timeString(e.At), e.Type, dash(attempt), dash(c), dash(strings.Join(details, " ")))
	}
}
