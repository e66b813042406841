package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem/client"
)

func (m Main) operationsCommand() *cobra.Command {
	var o remoteOptions
	cmd := &cobra.Command{
		Use:   "operations",
		Short: "Read the operations catalog",
		Args:  cobra.NoArgs,
	}
	o.addFlags(cmd, true)
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the operations and their retry contracts (GET /v1/operations)",
		Long: "List the server's operations catalog. With --format json the output is the catalog document\n" +
			"exactly as GET /v1/operations serves it. Read each operation's retry object (kind, keyRequired,\n" +
			"enforcement, responseSemantics, reconcile, rationale) before automating it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := m.session(o)
			if err != nil {
				return err
			}
			cat, err := s.client.Catalog(cmd.Context())
			if err != nil {
				return s.fail(err, nil)
			}
			return s.succeed(cat.Raw, func(w io.Writer) { catalogTable(w, cat) })
		},
	})
	return cmd
}

// catalogTable prints one line per operation, then the direct CLI
// operations.
func catalogTable(w io.Writer, cat *client.Catalog) {
	fmt.Fprintln(w, "OPERATION\tROUTE\tSIDE EFFECT\tRETRY\tKEY\tPREVIEW\tAPPROVAL\tRECONCILE")
	for _, op := range cat.Operations {
		key := "-"
		if op.Retry.KeyRequired {
			key = "required"
		}
		preview := "-"
		if op.Retry.Preview {
			preview = "yes"
		}
		fmt.Fprintf(w, "%s\t%s %s\t%s\t%s\t%s\t%s\t%s\t%s\n", op.Name, op.Method, op.Path, op.SideEffect,
			op.Retry.Kind, key, preview, op.Approval, dash(op.Retry.Reconcile))
	}
	if len(cat.DirectCLIOperations) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "DIRECT CLI OPERATION\tCOMMAND\tRETRY")
		for _, d := range cat.DirectCLIOperations {
			fmt.Fprintf(w, "%s\t%s\t%s\n", d.Name, d.Command, d.Retry.Kind)
		}
	}
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
