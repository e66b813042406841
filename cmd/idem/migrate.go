package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
)

func (m Main) migrateCommand() *cobra.Command {
	var store string
	cmd := &cobra.Command{
		Use:   "migrate --store URL",
		Short: "Create or upgrade the store's schema",
		Long: "Apply every pending schema migration to the store (sqlite:PATH or postgres://…).\n" +
			"Running it again is harmless; idem serve also migrates on start.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url := m.storeFlagValue(store)
			s, err := openStore(cmd.Context(), url, idem.StoreConfig{}, nil)
			if err != nil {
				return fmt.Errorf("migrate %s: %w", redact(url), err)
			}
			if err := s.Close(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "schema up to date: %s\n", redact(url))
			return err
		},
	}
	cmd.Flags().StringVar(&store, "store", "", "store URL: sqlite:PATH or postgres://USER@HOST:PORT/DB (env IDEM_STORE; default "+defaultStore+")")
	return cmd
}
