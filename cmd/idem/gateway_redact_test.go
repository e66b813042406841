package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idem-run/idem/gatewayconfig"
)

// TestRedactingHandler: a credential of the config never reaches the log,
// in the message, a string, an error, a group or an attribute added
// with With.
func TestRedactingHandler(t *testing.T) {
	cfg, err := gatewayconfig.Parse([]byte("upstreams:\n  - {name: a, url: 'http://h/mcp', headers: {Authorization: 'Bearer ${TOKEN}'}}\n"), t.TempDir(),
		func(string) string { return "hunter2-secret" })
	if err != nil {
		t.Fatal(err)
	}
	r := &redactor{}
	r.add(cfg)
	var buf bytes.Buffer
	log := slog.New(redacting{next: slog.NewJSONHandler(&buf, nil), r: r}).With("with", "x hunter2-secret")
	log.Info("dial Bearer hunter2-secret", "s", "hunter2-secret", "err", errors.New("401 for hunter2-secret"),
		slog.Group("g", "inner", "hunter2-secret"), "n", 3)
	out := buf.String()
	if strings.Contains(out, "hunter2") || strings.Count(out, "[redacted]") != 5 || !strings.Contains(out, `"n":3`) {
		t.Fatalf("logged %s", out)
	}
}
