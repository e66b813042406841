package schema

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
)

// slowParse is what Validate read every instance with before parse: the
// reference parse must agree with wherever it reads an instance.
func slowParse(instance []byte) (any, bool) {
	v, err := santhosh.UnmarshalJSON(bytes.NewReader(instance))
	if err != nil || checkNumbers(v, nil) != nil {
		return nil, false
	}
	return v, true
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, instance string
		ok             bool
	}{
		{"object", `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, true},
		{"spaces", " \t\r\n{ \"a\" : [ 1 , 2 ] } \n", true},
		{"empty containers", `{"a":{},"b":[]}`, true},
		{"scalar", `"x"`, true},
		{"numbers", `[0,-0,1.5,-2e10,3E+2,4e-3,123456789012345678901234567890]`, true},
		{"escapes", `["a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00"]`, true},
		{"UTF-8", `["é€😀"]`, true},
		{"invalid UTF-8, coerced", "[\"a\xffb\"]", true},
		{"lone surrogate, coerced", `["\ud800"]`, true},
		{"repeated name", `{"a":1,"a":2}`, true},
		{"empty", ``, false},
		{"only space", `  `, false},
		{"trailing data", `{} {}`, false},
		{"trailing comma", `[1,]`, false},
		{"leading zero", `[01]`, false},
		{"bare dot", `[1.]`, false},
		{"bad exponent", `[1e]`, false},
		{"plus sign", `[+1]`, false},
		{"bad literal", `[tru]`, false},
		{"literal then letters", `[truex]`, false},
		{"control character", "[\"a\x01\"]", false},
		{"bad escape", `["\x"]`, false},
		{"unterminated", `["abc`, false},
		{"long number", "[" + strings.Repeat("1", maxNumberLen+1) + "]", false},
		{"large exponent", `[1e1001]`, false},
		{"deep", strings.Repeat("[", maxParseDepth+1) + strings.Repeat("]", maxParseDepth+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parse([]byte(tc.instance))
			if ok != tc.ok {
				t.Fatalf("parse(%q) ok = %v, want %v", tc.instance, ok, tc.ok)
			}
			if want, wantOK := slowParse([]byte(tc.instance)); ok && (!wantOK || !reflect.DeepEqual(got, want)) {
				t.Fatalf("parse(%q) = %#v, encoding/json reads %#v (%v)", tc.instance, got, want, wantOK)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x\u00e9"],"b":null}`, `[true,false]`, `"\ud800"`, `{"a":{"a":{}}}`, `-0.0e-0`, "[\"\xff\"]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, instance []byte) {
		got, ok := parse(instance)
		if !ok {
			return
		}
		if want, wantOK := slowParse(instance); !wantOK || !reflect.DeepEqual(got, want) {
			t.Fatalf("parse(%q) = %#v, encoding/json reads %#v (%v)", instance, got, want, wantOK)
		}
	})
}
