package idem

import (
	"strings"
	"testing"
)

func TestParseKeyHeader(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLength)
	tests := []struct {
		name    string
		values  []string
		want    string
		invalid bool
	}{
		{name: "absent", values: nil, want: ""},
		{name: "uuid", values: []string{"3f1c2a8e-6b1d-4c7a-9a0e-2d4b5c6d7e8f"}, want: "3f1c2a8e-6b1d-4c7a-9a0e-2d4b5c6d7e8f"},
		{name: "ulid", values: []string{"01JDZ8M3Q4X6Y7Z8A9B0C1D2E3"}, want: "01JDZ8M3Q4X6Y7Z8A9B0C1D2E3"},
		{name: "base64 alphabet", values: []string{"aGVsbG8+d29y/bGQ=="}, want: "aGVsbG8+d29y/bGQ=="},
		{name: "prefixed", values: []string{"task:refund@ord_1.v2~x"}, want: "task:refund@ord_1.v2~x"},
		{name: "sf-string", values: []string{`"abc-123"`}, want: "abc-123"},
		{name: "max length", values: []string{long}, want: long},
		{name: "max length quoted", values: []string{`"` + long + `"`}, want: long},
		{name: "too long", values: []string{long + "k"}, invalid: true},
		{name: "empty", values: []string{""}, invalid: true},
		{name: "empty sf-string", values: []string{`""`}, invalid: true},
		{name: "lone quote", values: []string{`"`}, invalid: true},
		{name: "unbalanced quote", values: []string{`"abc`}, invalid: true},
		{name: "space", values: []string{"a b"}, invalid: true},
		{name: "comma", values: []string{"a,b"}, invalid: true},
		{name: "escaped quote inside", values: []string{`"a\"b"`}, invalid: true},
		{name: "non-ascii", values: []string{"clé"}, invalid: true},
		{name: "repeated", values: []string{"a", "a"}, invalid: true},
		{name: "repeated distinct", values: []string{"a", "b"}, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKeyHeader(tt.values)
			if tt.invalid {
				if ErrorCode(err) != CodeIdempotencyKeyInvalid {
					t.Fatalf("ParseKeyHeader(%q) = %q, %v; want IDEMPOTENCY_KEY_INVALID", tt.values, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseKeyHeader(%q) = %q, %v; want %q", tt.values, got, err, tt.want)
			}
		})
	}
}

func FuzzParseKeyHeader(f *testing.F) {
	for _, seed := range []string{"abc", `"abc"`, "", `"`, "a b", strings.Repeat("x", 256), "01JDZ8M3Q4", "a=b+c/d@e:f~g.h_i-j"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKeyHeader([]string{v})
		if err != nil {
			if ErrorCode(err) != CodeIdempotencyKeyInvalid {
				t.Fatalf("error code %s", ErrorCode(err))
			}
			return
		}
		if len(key) < 1 || len(key) > MaxKeyLength {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for i := 0; i < len(key); i++ {
			if !keyChar(key[i]) {
				t.Fatalf("accepted key %q with byte %q", key, key[i])
			}
		}
		if key != v && `"`+key+`"` != v {
			t.Fatalf("key %q is neither the value %q nor its unquoted form", key, v)
		}
		if again, err := ParseKeyHeader([]string{key}); err != nil || again != key {
			t.Fatalf("the parsed key %q does not parse to itself: %q, %v", key, again, err)
		}
	})
}
