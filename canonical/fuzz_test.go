package canonical

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// Seed corpora live in testdata/fuzz/FuzzTransform and
// testdata/fuzz/FuzzFingerprint.

func FuzzTransform(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Transform(data)
		strict, serr := TransformStrict(data)
		switch {
		case serr == nil && !bytes.Equal(strict, out):
			t.Fatalf("TransformStrict(%q) = %q, Transform %q", data, strict, out)
		case err != nil && serr == nil:
			t.Fatalf("TransformStrict accepts %q, which Transform refuses: %v", data, err)
		case err == nil && serr != nil && !strings.Contains(serr.Error(), "exactly representable") && !strings.Contains(serr.Error(), "NUL"):
			t.Fatalf("TransformStrict refuses %q for another reason than the strict profile: %v", data, serr)
		}
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SyntaxError: %v", err, err)
			}
			if se.Offset < 0 || se.Offset > len(data) {
				t.Fatalf("error offset %d outside input of %d bytes", se.Offset, len(data))
			}
			if out != nil {
				t.Fatalf("output %q returned with error %v", out, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted %q, which encoding/json says is invalid", data)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("output %q is not valid UTF-8 JSON", out)
		}
		again, err := Transform(out)
		if err != nil {
			t.Fatalf("Transform(%q) failed on its own output: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", data, out, again)
		}
		var in, back any
		if err := json.Unmarshal(data, &in); err != nil {
			t.Fatalf("encoding/json cannot decode accepted input %q: %v", data, err)
		}
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("encoding/json cannot decode output %q: %v", out, err)
		}
		if !reflect.DeepEqual(in, back) {
			t.Fatalf("output decodes to a different value:\n in  %q: %#v\n out %q: %#v", data, in, out, back)
		}
		if want := referenceCanonical(in); !bytes.Equal(out, want) {
			t.Fatalf("output differs from the reference canonicalizer:\n in   %q\n got  %q\n want %q", data, out, want)
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	f.Fuzz(func(t *testing.T, method, path, rawQuery string, body []byte) {
		q, _ := url.ParseQuery(rawQuery) // keeps what parses, as a server would
		r := Request{Method: method, Path: path, Query: q, Body: body}
		fp, err := Fingerprint(r)
		fp2, err2 := Fingerprint(r)
		if fp != fp2 || (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %q, %v then %q, %v", fp, err, fp2, err2)
		}
		canon, terr := Transform(body)
		if len(body) > 0 && (terr == nil) != (err == nil) {
			t.Fatalf("Fingerprint error %v but Transform error %v", err, terr)
		}
		if err != nil {
			if len(body) == 0 {
				t.Fatalf("error without a body: %v", err)
			}
			return
		}
		if len(fp) != 64 || strings.Trim(fp, "0123456789abcdef") != "" {
			t.Fatalf("fingerprint %q is not 64 lower-case hex digits", fp)
		}
		same := func(what string, r2 Request) {
			t.Helper()
			got, err := Fingerprint(r2)
			if err != nil || got != fp {
				t.Fatalf("%s changed the fingerprint: %s -> %s, %v", what, fp, got, err)
			}
		}
		if len(body) > 0 {
			same("canonicalizing the body", Request{Method: method, Path: path, Query: q, Body: canon})
		}
		if isASCII(method) {
			same("lower-casing the method", Request{Method: strings.ToLower(method), Path: path, Query: q, Body: body})
		}
		if _, ok := q["dryRun"]; !ok {
			// Every parameter counts, dryRun too: the pipeline removes it
			// before, once it has parsed it.
			withDryRun := maps.Clone(q)
			if withDryRun == nil {
				withDryRun = url.Values{}
			}
			withDryRun["dryRun"] = []string{"true"}
			if got, err := Fingerprint(Request{Method: method, Path: path, Query: withDryRun, Body: body}); err != nil || got == fp {
				t.Fatalf("adding dryRun kept the fingerprint %s (%v)", got, err)
			}
		}
		if len(q) > 0 {
			other := url.Values{}
			for k, v := range q { // rebuilt in another map iteration order
				other[k] = slices.Clone(v)
			}
			same("rebuilding the query", Request{Method: method, Path: path, Query: other, Body: body})
		}
		if got, err := Fingerprint(Request{Method: method, Path: path + "x", Query: q, Body: body}); err != nil || got == fp {
			t.Fatalf("changing the path kept the fingerprint %s (%v)", got, err)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// referenceCanonical is a slow, independent RFC 8785 serializer for values
// decoded by encoding/json, used to cross-check Transform.
func referenceCanonical(v any) []byte {
	var b bytes.Buffer
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case nil:
			b.WriteString("null")
		case bool:
			fmt.Fprint(&b, v)
		case float64:
			b.WriteString(referenceNumber(v))
		case string:
			b.WriteByte('"')
			for _, r := range v {
				switch {
				case r == '"' || r == '\\':
					b.WriteByte('\\')
					b.WriteRune(r)
				case r < 0x20:
					if short, ok := map[rune]string{'\b': `\b`, '\t': `\t`, '\n': `\n`, '\f': `\f`, '\r': `\r`}[r]; ok {
						b.WriteString(short)
					} else {
						fmt.Fprintf(&b, `\u%04x`, r)
					}
				default:
					b.WriteRune(r)
				}
			}
			b.WriteByte('"')
		case []any:
			b.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					b.WriteByte(',')
				}
				write(e)
			}
			b.WriteByte(']')
		case map[string]any:
			keys := slices.SortedFunc(maps.Keys(v), func(x, y string) int {
				return slices.Compare(utf16.Encode([]rune(x)), utf16.Encode([]rune(y)))
			})
			b.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					b.WriteByte(',')
				}
				write(k)
				b.WriteByte(':')
				write(v[k])
			}
			b.WriteByte('}')
		default:
			panic(fmt.Sprintf("unexpected %T", v))
		}
	}
	write(v)
	return b.Bytes()
}
