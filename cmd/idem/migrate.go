package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
)

func (m Main) migrateCommand() *cobra.Command {
	var store string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "migrate --store URL",
		Short: "Create or upgrade the store's schema",
		Long: "Apply every pending schema migration to the store (sqlite:PATH or postgres://…).\n" +
			"Running it again is harmless; idem serve also migrates on start.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url := m.storeFlagValue(store)
			s, err := openStore(cmd.Context(), url, idem.StoreConfig{ConnectTimeout: timeout}, nil)
			if err != nil {
				return fmt.Errorf("migrate %s: %w", redact(url), err)
			}
			var applied []string
			if m, ok := s.(interface{ Migrated() []string }); ok {
				applied = m.Migrated()
			}
			if err := s.Close(); err != nil {
				return err
			}
			if len(applied) == 0 {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "schema up to date: %s\n", redact(url))
			} else {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "applied %s to %s\n", strings.Join(applied, ", "), redact(url))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&store, "store", "", "store URL: sqlite:PATH or postgres://USER@HOST:PORT/DB (env IDEM_STORE; default "+defaultStore+")")
	cmd.Flags().DurationVar(&timeout, "store-connect-timeout", defaultStoreTimeout, storeTimeoutHelp)
	return cmd
}
