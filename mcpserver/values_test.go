package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idem-run/idem"
)

// MCP arguments go through the runner's input decode (SPEC §6.2): a NUL in
// a body or path argument and an integer beyond ±(2^53−1) are INVALID_INPUT
// at the argument's path, and the key is not consumed.
func TestArgumentValuesAreTheRunnersRules(t *testing.T) {
	f := start(t)
	cs := f.connect(t, tokenAgent)
	for _, tc := range []struct {
		name string
		args map[string]any
		path string
		msg  string
	}{
		{"NUL in a body argument", map[string]any{"shop": "s1", "name": "a\x00b"}, "/name", "NUL character (U+0000)"},
		{"NUL in a path argument", map[string]any{"shop": "s\x00", "name": "a"}, "/shop", "NUL character (U+0000)"},
		{"integer beyond 2^53", map[string]any{"shop": "s1", "name": "a", "n": json.Number("9007199254740993")}, "/n", "integer 9007199254740993 is outside the exactly representable range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"idempotencyKey": "k-values"}
			for k, v := range tc.args {
				args[k] = v
			}
			p := wantProblem(t, call(t, cs, "gadget.create", args), idem.CodeInvalidInput)
			errs, _ := at(p, "details.errors").([]any)
			if len(errs) == 0 {
				t.Fatalf("no details.errors: %v", p)
			}
			first := errs[0].(map[string]any)
			if first["path"] != tc.path || !strings.Contains(first["message"].(string), tc.msg) {
				t.Fatalf("details.errors[0] = %v, want path %q and %q", first, tc.path, tc.msg)
			}
		})
	}
	if n := f.creates.Load(); n != 0 {
		t.Fatalf("gadget.create ran %d times, want 0", n)
	}
	res := call(t, cs, "gadget.create", map[string]any{"shop": "s1", "name": "ab", "idempotencyKey": "k-values"})
	if body := structured(t, res); res.IsError || at(body, "meta.idempotency.replayed") != false {
		t.Fatalf("the key after refused inputs: %v", body)
	}
}
