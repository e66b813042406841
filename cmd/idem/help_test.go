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

// TestDecodeBudgetHelpSaysWhatTheCodeDoes: --decode-budget-mb's help
// describes the body's share as pipeline.BodyCharge takes it (it grows as
// the bytes arrive, and values count 16 bytes), not the Content-Length it
// counted before issue 28 (issue 33, Low).
func TestDecodeBudgetHelpSaysWhatTheCodeDoes(t *testing.T) {
	serve, _, err := Main{Getenv: func(string) string { return "" }}.rootCommand().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	usage := serve.Flags().Lookup("decode-budget-mb").Usage
	for _, want := range []string{"grows as its bytes arrive", "16 bytes a JSON value", "--admission-wait"} {
		if !strings.Contains(usage, want) {
			t.Errorf("--decode-budget-mb's help lacks %q: %s", want, usage)
		}
	}
	if strings.Contains(usage, "Content-Length") {
		t.Errorf("--decode-budget-mb's help still says a body counts its Content-Length: %s", usage)
	}
}
