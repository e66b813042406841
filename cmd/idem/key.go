package main

import (
	"crypto/rand"
	"fmt"

	"github.com/spf13/cobra"
)

func (m Main) keyCommand() *cobra.Command {
	key := &cobra.Command{Use: "key", Short: "Idempotency keys"}
	key.AddCommand(&cobra.Command{
		Use:   "new",
		Short: "Print a new random idempotency key (a UUID v4) alone on a line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), newKey())
			return err
		},
	})
	return key
}

// newKey returns a random UUID v4: 122 random bits, valid as a key.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
