package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/idem-run/idem/canonical"
)

// marshalledArgs is the argument object of a body as encoding/json writes
// it, the form asMarshalled vouches for.
func marshalledArgs(t *testing.T, canon []byte) []byte {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(canon, &args); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestAsMarshalled(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		as         bool
	}{
		{"empty", `{}`, true},
		{"plain", `{"b":1,"a":"x","c":[1,{"z":null,"y":true}]}`, true},
		{"escapes", `{"a\"b":"\n\u0001\\","é":"€ ü"}`, true},
		{"numbers", `{"a":1.5e3,"b":-0,"c":0.000001,"d":1E-7,"e":-9007199254740991}`, true},
		{"html in a value", `{"a":"<b>&"}`, false},
		{"html in a name", `{"<":1}`, false},
		{"line separator", `{"a":"\u2028"}`, false},
		{"paragraph separator", `{"a":"\u2029"}`, false},
		{"private use and astral names", `{"\ue000":1,"\ud83d\ude00":2}`, false},
		{"astral value", `{"a":"\ud83d\ude00"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canon, err := canonical.TransformStrict([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := asMarshalled(canon); got != tc.as {
				t.Fatalf("asMarshalled(%s) = %v, want %v", canon, got, tc.as)
			}
			if raw := marshalledArgs(t, canon); tc.as && string(raw) != string(canon) {
				t.Fatalf("encoding/json writes %s, the canonical form is %s", raw, canon)
			}
		})
	}
}

func FuzzAsMarshalled(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"<"}`, `{"b":1,"a":[{"d":1,"c":2}]}`, `{"\u007f":"\u2028"}`, `{"\ue000":1,"\ud800\udc00":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		canon, err := canonical.TransformStrict(body)
		if err != nil || canon[0] != '{' || !asMarshalled(canon) {
			return
		}
		if raw := marshalledArgs(t, canon); string(raw) != string(canon) {
			t.Fatalf("encoding/json writes %s, the canonical form is %s", raw, canon)
		}
	})
}
