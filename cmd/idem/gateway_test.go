package main

import (
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       []string
		fails      bool
	}{
		{"words", "node server.js --flag", []string{"node", "server.js", "--flag"}, false},
		{"spaces collapse", "  node\tserver.js  ", []string{"node", "server.js"}, false},
		{"double quotes", `node "/path with space/s.js"`, []string{"node", "/path with space/s.js"}, false},
		{"single quotes keep double ones", `echo 'a "b" c'`, []string{"echo", `a "b" c`}, false},
		{"quotes join a word", `a"b c"d`, []string{"ab cd"}, false},
		{"an empty quoted argument", `cmd ""`, []string{"cmd", ""}, false},
		{"unterminated", `node "x`, nil, true},
		{"empty", "   ", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := splitCommand(tc.line)
			if (err != nil) != tc.fails || !slices.Equal(got, tc.want) {
				t.Errorf("splitCommand(%q) = %q, %v", tc.line, got, err)
			}
		})
	}
}

func TestGatewayUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no upstream", []string{"gateway"}, "--upstream URL"},
		{"both upstreams", []string{"gateway", "--upstream", "http://x/mcp", "--upstream-command", "node s.js"}, "one of them"},
		{"not a URL", []string{"gateway", "--upstream", "ftp://x", "--store", "sqlite::memory:"}, "not an http(s) URL"},
		{"a header without =", []string{"gateway", "--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "X-Token", "--store", "sqlite::memory:"}, "NAME=VALUE"},
		{"a header for a spawned upstream", []string{"gateway", "--upstream-command", "node s.js", "--upstream-header", "A=b", "--store", "sqlite::memory:"}, "HTTP upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, nil, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// idem gateway raises the collector's target unless GOGC is set (issue
// 34: the MCP SDK's garbage).
func TestGatewayGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	gatewayGC(func(string) string { return "150" })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the target became %d", got)
	}
	gatewayGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != gatewayGCPercent {
		t.Errorf("without GOGC, the target is %d, want %d", got, gatewayGCPercent)
	}
}
