package mcpserver

import (
	"encoding/json"
	"testing"
)

func TestLiftKeys(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"params key moves into _meta",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{},"idempotencyKey":"k"}}`,
			`{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.idem/params.idempotencyKey":"k"},"arguments":{},"name":"t"}}`},
		{"existing _meta is kept",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":3},"idempotencyKey":"k"}}`,
			`{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.idem/params.idempotencyKey":"k","progressToken":3},"name":"t"}}`},
		{"a key in the arguments stays there",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"idempotencyKey":"k"}}}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"idempotencyKey":"k"}}}`},
		{"other methods pass",
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"idempotencyKey":"k"}}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"idempotencyKey":"k"}}`},
		{"a batch",
			`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","idempotencyKey":"k"}}]`,
			`[{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.idem/params.idempotencyKey":"k"},"name":"t"}}]`},
		{"not JSON passes", `{"idempotencyKey"`, `{"idempotencyKey"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(liftKeys([]byte(tc.in))); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestKeyOutsideArguments(t *testing.T) {
	var tool Tool
	tool.Retry.Kind = "same_key_replay"
	for _, tc := range []struct {
		name, arg string
		meta      map[string]any
		want      string
		fails     bool
	}{
		{"none", "", nil, "", false},
		{"argument only", "a", nil, "a", false},
		{"_meta only", "", map[string]any{MetaIdempotencyKey: "m"}, "m", false},
		{"params only", "", map[string]any{liftedKey: "p"}, "p", false},
		{"the same key twice", "a", map[string]any{MetaIdempotencyKey: "a", liftedKey: "a"}, "a", false},
		{"two keys", "a", map[string]any{MetaIdempotencyKey: "b"}, "", true},
		{"not a string", "", map[string]any{MetaIdempotencyKey: json.Number("1")}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyOutsideArguments(tool, tc.meta, tc.arg)
			if (err != nil) != tc.fails || got != tc.want {
				t.Errorf("got %q, %v", got, err)
			}
		})
	}
}
