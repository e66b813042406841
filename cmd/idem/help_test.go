package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpListsEveryFlag: each command's --help lists every flag it
// takes, its own and the ones it inherits (idem serve --help once lacked
// --tokens-file).
func TestHelpListsEveryFlag(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
		path := strings.Fields(cmd.CommandPath())[1:]
		code, out, stderr := run(t, nil, append(path, "--help")...)
		if code != 0 {
			t.Errorf("idem %s --help = exit %d, stderr %q", strings.Join(path, " "), code, stderr)
			return
		}
		check := func(f *pflag.Flag) {
			if !strings.Contains(out, "--"+f.Name+" ") && !strings.Contains(out, "--"+f.Name+"\n") {
				t.Errorf("idem %s --help does not list --%s (hidden: %t):\n%s", strings.Join(path, " "), f.Name, f.Hidden, out)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.InheritedFlags().VisitAll(check)
	}
	walk(Main{Getenv: func(string) string { return "" }}.rootCommand())
}
