package canonical

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestTransform(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "RFC 8785 §3.2.4 sample",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "RFC 8785 §3.2.3 sorting",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
				"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{
			// By UTF-8 bytes U+E000 (EE 80 80) sorts before U+1F600 (F0 9F 98 80);
			// by UTF-16 code units U+1F600 (D83D DE00) sorts first.
			name: "supplementary character before U+E000-U+FFFF",
			in:   "{\"\ue000\":1,\"\uffff\":2,\"😀\":3,\"\U0010ffff\":4,\"\ud7ff\":5}",
			want: "{\"\ud7ff\":5,\"😀\":3,\"\U0010ffff\":4,\"\ue000\":1,\"\uffff\":2}",
		},
		{
			name: "escaped and literal supplementary keys are the same name space",
			in:   `{"\ud83d\ude01":1,"😀":2}`,
			want: `{"😀":2,"😁":1}`,
		},
		{name: "prefix sorts first", in: `{"ab":1,"a":2,"":3}`, want: `{"":3,"a":2,"ab":1}`},
		{name: "nested objects sorted, arrays kept", in: `{"b":[3,1,{"z":1,"y":2}],"a":{"d":null,"c":true}}`, want: `{"a":{"c":true,"d":null},"b":[3,1,{"y":2,"z":1}]}`},
		{name: "already canonical", in: `{"a":[1,"x",{}],"b":[]}`, want: `{"a":[1,"x",{}],"b":[]}`},
		{name: "whitespace everywhere", in: " \t\r\n{ \"a\" :\t[ 1 ,\n2 ] , \"b\" : { } }\r\n ", want: `{"a":[1,2],"b":{}}`},
		{name: "top-level string", in: `"x"`, want: `"x"`},
		{name: "top-level number", in: `4.50`, want: `4.5`},
		{name: "top-level literal", in: `null`, want: `null`},
		{name: "empty string", in: `""`, want: `""`},
		{
			name: "control characters",
			in:   `"\u0000\u0001\b\t\n\u000b\f\r\u000e\u001f\u0020"`,
			want: `"\u0000\u0001\b\t\n\u000b\f\r\u000e\u001f "`,
		},
		{name: "short escapes of quote, backslash, solidus", in: `"\"\\\/"`, want: `"\"\\/"`},
		{name: "upper-case hex escapes", in: `"\u00E9\u00e9\u001F"`, want: "\"éé\\u001f\""},
		{name: "DEL and C1 controls literal", in: `"\u007f\u0085"`, want: "\"\u007f\u0085\""},
		{name: "U+2028 and U+2029 literal", in: `"\u2028\u2029"`, want: "\"\u2028\u2029\""},
		{name: "non-ASCII literal kept", in: `"héllo wörld 日本 😀"`, want: `"héllo wörld 日本 😀"`},
		{name: "escaped non-ASCII unescaped", in: `"\u65e5\ud83d\ude00"`, want: `"日😀"`},
		{name: "noncharacter kept", in: `"\uffff\ufdd0"`, want: "\"\uffff\ufdd0\""},
		{name: "U+FFFD kept", in: "\"\ufffd\"", want: "\"\ufffd\""},
		{name: "number 1.0", in: `1.0`, want: `1`},
		{name: "number -0", in: `-0`, want: `0`},
		{name: "number -0.0e-5", in: `-0.0e-5`, want: `0`},
		{name: "number exponent forms", in: `[1E2,1e+2,1e-2,0.1e1,10e-1]`, want: `[100,100,0.01,1,1]`},
		{name: "number 1e21", in: `1e21`, want: `1e+21`},
		{name: "number just below 1e21", in: `999999999999999900000`, want: `999999999999999900000`},
		{name: "number 1e-7", in: `0.0000001`, want: `1e-7`},
		{name: "number 1e-6", in: `1e-6`, want: `0.000001`},
		{name: "number 1.5e-7", in: `0.00000015`, want: `1.5e-7`},
		{name: "number 2^53+1 rounds", in: `9007199254740993`, want: `9007199254740992`},
		{name: "long integer", in: `123456789012345678901234567890`, want: `1.2345678901234568e+29`},
		{name: "fifteen-digit integer", in: `-999999999999999`, want: `-999999999999999`},
		{name: "sixteen-digit integer", in: `1234567890123456`, want: `1234567890123456`},
		{name: "max double", in: `1.7976931348623157e308`, want: `1.7976931348623157e+308`},
		{name: "min subnormal", in: `5e-324`, want: `5e-324`},
		{name: "underflow to zero", in: `[1e-400,-1e-400]`, want: `[0,0]`},
		{name: "huge exponent zero", in: `0e999999999999999999`, want: `0`},
		{name: "many digits", in: `0.1000000000000000055511151231257827021181583404541015625`, want: `0.1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Transform([]byte(tt.in))
			if err != nil {
				t.Fatalf("Transform(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Transform(%q)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			again, err := Transform(got)
			if err != nil || string(again) != string(got) {
				t.Errorf("Transform is not idempotent: %s -> %s, %v", got, again, err)
			}
		})
	}
}

func TestTransformRejects(t *testing.T) {
	tests := []struct {
		name, in string
		offset   int
		msg      string // substring of the error
	}{
		{"empty input", ``, 0, "unexpected end of input"},
		{"only whitespace", "  \n", 3, "unexpected end of input"},
		{"duplicate key", `{"a":1,"a":2}`, 7, `canonical: duplicate key "a" at offset 7`},
		{"duplicate key through escape", `{"a":1,"b":2,"\u0061":3}`, 13, `duplicate key "a"`},
		{"duplicate key nested", `[{"x":{"k":1,"j":2,"k":3}}]`, 19, `duplicate key "k"`},
		{"duplicate empty key", `{"":1,"":2}`, 6, `duplicate key ""`},
		{"trailing data", `{} {}`, 3, "unexpected data after the JSON value"},
		{"trailing garbage", `1 x`, 2, "unexpected data after the JSON value"},
		{"two values", `1 2`, 2, "unexpected data after the JSON value"},
		{"trailing comma in array", `[1,]`, 3, "unexpected character ']'"},
		{"trailing comma in object", `{"a":1,}`, 7, "object member name was expected"},
		{"missing colon", `{"a" 1}`, 5, "':' was expected"},
		{"missing comma", `[1 2]`, 3, "',' or ']' was expected"},
		{"unquoted key", `{a:1}`, 1, "object member name was expected"},
		{"single quotes", `'a'`, 0, "unexpected character '\\''"},
		{"unterminated array", `[1`, 2, "unexpected end of input"},
		{"unterminated object", `{"a":1`, 6, "unexpected end of input"},
		{"unterminated string", `"abc`, 0, "unterminated string"},
		{"unterminated escape", `"\`, 1, "unterminated escape"},
		{"bad escape", `"\x41"`, 1, `invalid escape sequence \x`},
		{"bad unicode escape", `"\u12G4"`, 1, `invalid \u escape`},
		{"short unicode escape", `"\u12"`, 1, `invalid \u escape`},
		{"lone high surrogate", `"\ud800"`, 1, `lone surrogate \ud800`},
		{"lone low surrogate", `"\udc00"`, 1, `lone surrogate \udc00`},
		{"high surrogate then BMP", `"\ud800\u0041"`, 1, `lone surrogate \ud800`},
		{"two high surrogates", `"\ud800\ud800"`, 1, `lone surrogate \ud800`},
		{"swapped surrogates", `"\udc00\ud800"`, 1, `lone surrogate \udc00`},
		{"lone surrogate in key", `{"\udfff":1}`, 2, `lone surrogate \udfff`},
		{"raw control character", "\"a\nb\"", 2, "unescaped control character U+000A"},
		{"raw tab", "\"\t\"", 1, "unescaped control character U+0009"},
		{"invalid UTF-8", "\"\xff\"", 1, "invalid UTF-8"},
		{"truncated UTF-8", "\"\xe2\x82\"", 1, "invalid UTF-8"},
		{"overlong UTF-8", "\"\xc0\xaf\"", 1, "invalid UTF-8"},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", 1, "invalid UTF-8"},
		{"invalid UTF-8 in key", "{\"\xff\":1}", 2, "invalid UTF-8"},
		{"invalid UTF-8 outside string", "[\xff]", 1, "unexpected byte 0xff"},
		{"byte order mark", "\ufeff{}", 0, "unexpected character '\\ufeff'"},
		{"number overflow", `1e400`, 0, "number 1e400 out of range"},
		{"negative number overflow", `[-1.8e308]`, 1, "number -1.8e308 out of range"},
		{"long overflow shortened", `1` + strings.Repeat("0", 400), 0, "out of range"},
		{"NaN", `NaN`, 0, "unexpected character 'N'"},
		{"Infinity", `-Infinity`, 1, "digit was expected"},
		{"leading zero", `01`, 1, "leading zero"},
		{"negative leading zero", `-01`, 2, "leading zero"},
		{"leading plus", `+1`, 0, "unexpected character '+'"},
		{"bare minus", `-`, 1, "unexpected end of input"},
		{"leading dot", `.5`, 0, "unexpected character '.'"},
		{"trailing dot", `1.`, 2, "after '.'"},
		{"empty exponent", `1e`, 2, "exponent"},
		{"signed empty exponent", `1e+`, 3, "exponent"},
		{"hex number", `0x10`, 1, "unexpected data after the JSON value"},
		{"bad literal", `tru`, 0, "invalid literal (expected true)"},
		{"capital literal", `True`, 0, "unexpected character 'T'"},
		{"literal prefix", `nulll`, 4, "unexpected data"},
		{"comment", `[1 /* x */]`, 3, "unexpected character '/'"},
		{"too deep arrays", strings.Repeat("[", 1000) + strings.Repeat("]", 1000), MaxDepth, "nesting deeper than 512 levels"},
		{"too deep objects", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), 5 * MaxDepth, "nesting deeper"},
		{"very deep unterminated", strings.Repeat("[", 1_000_000), MaxDepth, "nesting deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Transform([]byte(tt.in))
			if err == nil {
				t.Fatalf("Transform(%q) = %s, want an error", tt.in, got)
			}
			if got != nil {
				t.Errorf("Transform returned output %q with its error", got)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SyntaxError", err)
			}
			if se.Offset != tt.offset {
				t.Errorf("offset = %d, want %d (%v)", se.Offset, tt.offset, err)
			}
		})
	}
}

// TestErrorPointer checks that errors name the JSON Pointer of the value
// (or member) where the problem is.
func TestErrorPointer(t *testing.T) {
	tests := []struct{ name, in, pointer string }{
		{"root", `{} x`, ""},
		{"value in an object", "{\"a\":{\"b\":\"\xff\"}}", "/a/b"},
		{"duplicate key", `{"a":1,"a":2}`, "/a"},
		{"duplicate key nested", `[{"x":{"k":1,"j":2,"k":3}}]`, "/0/x/k"},
		{"invalid UTF-8 in a nested string", "{\"a\":[1,{\"b\":\"\xff\"}]}", "/a/1/b"},
		{"invalid UTF-8 in a member name", "{\"a\":{\"\xff\":1}}", "/a"},
		{"lone surrogate", `{"a":["x","\ud800"]}`, "/a/1"},
		{"overflow", `{"a~b/c":1e400}`, "/a~0b~1c"},
		{"syntax in an array", `{"a":[1,}`, "/a/1"},
		{"too deep", `{"a":` + strings.Repeat("[", 1000), "/a" + strings.Repeat("/0", MaxDepth-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Transform([]byte(tt.in))
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Transform(%q) = %v, want a *SyntaxError", tt.in, err)
			}
			if se.Pointer != tt.pointer {
				t.Errorf("pointer = %q, want %q (%v)", se.Pointer, tt.pointer, err)
			}
		})
	}
}

// TestPointerAt finds the value encoding/json names by the offset of an
// UnmarshalTypeError.
func TestPointerAt(t *testing.T) {
	doc := `{"a":[1,{"b":300}],"c~/d":"x","e":{"f":true}}`
	tests := []struct {
		name    string
		offset  int
		pointer string
	}{
		{"the root object at its bracket", 1, ""},
		{"an array at its bracket", strings.Index(doc, "[") + 1, "/a"},
		{"a number at its end", strings.Index(doc, "300") + 3, "/a/1/b"},
		{"an element", strings.Index(doc, "1,") + 1, "/a/0"},
		{"an escaped name", strings.Index(doc, `"x"`) + 3, "/c~0~1d"},
		{"an object at its bracket", strings.Index(doc, `{"f"`) + 1, "/e"},
		{"a literal", strings.Index(doc, "true") + 4, "/e/f"},
		{"past the end", len(doc) + 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PointerAt([]byte(doc), tt.offset); got != tt.pointer {
				t.Errorf("PointerAt(%d) = %q, want %q", tt.offset, got, tt.pointer)
			}
		})
	}
}

// TestTransformStrict checks the strict profile: numbers within
// ±MaxExactInteger and no NUL, with the pointer of the value refused; what
// it accepts it writes as Transform does.
func TestTransformStrict(t *testing.T) {
	const outside = "outside the exactly representable range ±9007199254740991 (I-JSON); send it as a string if the schema declares a string"
	refused := []struct{ name, in, pointer, msg string }{
		{"2^53+1", `{"amount":9007199254740993}`, "/amount", "integer 9007199254740993 is " + outside},
		{"2^53", `{"amount":9007199254740992}`, "/amount", "integer 9007199254740992 is " + outside},
		{"-(2^53)", `[-9007199254740992]`, "/0", "integer -9007199254740992 is " + outside},
		{"2^53+1 with a fraction", `{"a":9007199254740993.0}`, "/a", "number 9007199254740993.0 is " + outside},
		{"2^53+1 with an exponent", `{"a":9.007199254740993e15}`, "/a", "number 9.007199254740993e15 is " + outside},
		{"1e20", `{"a":[1,1e20]}`, "/a/1", "number 1e20 is " + outside},
		{"beyond a double", `{"a":{"b":1e400}}`, "/a/b", "number 1e400 is " + outside},
		{"beyond a double, negative", `-1e400`, "", "number -1e400 is " + outside},
		{"long integer shortened", `{"a":` + strings.Repeat("9", 400) + `}`, "/a", "integer 9999999999999999999999999999999999999... is"},
		{"NUL in a string", `{"name":"a\u0000b"}`, "/name", "strings must not contain the NUL character (U+0000)"},
		{"NUL in a nested string", `{"a":[{"b":["x","\u0000"]}]}`, "/a/0/b/1", "NUL character"},
		{"NUL in a member name", `{"a":{"x\u0000":1}}`, "/a/x\x00", "NUL character"},
		{"NUL as the root", `"\u0000"`, "", "NUL character"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TransformStrict([]byte(tt.in))
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("TransformStrict(%q) = %s, %v; want a *SyntaxError", tt.in, got, err)
			}
			if se.Pointer != tt.pointer || !strings.Contains(se.Reason(), tt.msg) {
				t.Errorf("error at %q: %q; want at %q: %q", se.Pointer, se.Reason(), tt.pointer, tt.msg)
			}
		})
	}
	accepted := []struct{ name, in, want string }{
		{"2^53-1", `[9007199254740991,-9007199254740991]`, `[9007199254740991,-9007199254740991]`},
		{"integer spellings", `[5,5.0,5e0,50e-1,0.5e1,-0,1e6,9007199254740991.0]`, `[5,5,5,5,5,0,1000000,9007199254740991]`},
		{"fractions", `[0.1,1.5,-2.25,1e-7,9007199254740990.5]`, `[0.1,1.5,-2.25,1e-7,9007199254740990]`},
		{"underflow is zero", `[1e-400]`, `[0]`},
		{"U+0001 and the text \\u0000", `["\u0001","\\u0000"]`, `["\u0001","\\u0000"]`},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TransformStrict([]byte(tt.in))
			if err != nil || string(got) != tt.want {
				t.Fatalf("TransformStrict(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
			}
			if plain, _ := Transform([]byte(tt.in)); string(plain) != string(got) {
				t.Errorf("Transform writes %s, TransformStrict %s", plain, got)
			}
		})
	}
}

func TestTransformDepthLimit(t *testing.T) {
	nested := func(depth int) string {
		return strings.Repeat("[", depth) + strings.Repeat("]", depth)
	}
	if _, err := Transform([]byte(nested(MaxDepth))); err != nil {
		t.Errorf("depth %d refused: %v", MaxDepth, err)
	}
	if _, err := Transform([]byte(nested(MaxDepth + 1))); err == nil {
		t.Errorf("depth %d accepted", MaxDepth+1)
	}
	// Depth is nesting, not the number of containers.
	wide := strings.Repeat("[[]],", 10_000) + "[]"
	if _, err := Transform([]byte("[" + wide + "]")); err != nil {
		t.Errorf("wide array refused: %v", err)
	}
}

func TestTransformDoesNotModifyInput(t *testing.T) {
	in := []byte(`{"b":"\u00e9","a":[1.0, -0]}`)
	orig := string(in)
	if _, err := Transform(in); err != nil {
		t.Fatal(err)
	}
	if string(in) != orig {
		t.Errorf("input changed to %q", in)
	}
}

// TestNumberAppendixB checks the number samples of RFC 8785 Appendix B, both
// formatted directly and parsed from JSON text.
func TestNumberAppendixB(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		t.Run(strconv.FormatUint(tt.bits, 16), func(t *testing.T) {
			f := math.Float64frombits(tt.bits)
			if got := string(appendNumber(nil, f)); got != tt.want {
				t.Errorf("appendNumber(%016x) = %s, want %s", tt.bits, got, tt.want)
			}
			// Through the parser, from 17 significant digits and from the
			// expected output itself.
			for _, text := range []string{strconv.FormatFloat(f, 'e', 16, 64), tt.want} {
				got, err := Transform([]byte(text))
				if err != nil {
					t.Fatalf("Transform(%s): %v", text, err)
				}
				if string(got) != tt.want {
					t.Errorf("Transform(%s) = %s, want %s", text, got, tt.want)
				}
			}
		})
	}
	// NaN and Infinity (0x7fffffffffffffff, 0x7ff0000000000000) cannot be
	// written in JSON; TestTransformRejects covers their spellings and overflow.
}

// referenceNumber is a second, differently built ECMAScript number formatter:
// fixed notation from strconv for 1e-6 <= |f| < 1e21, exponent otherwise.
func referenceNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // e.g. 1e+21, 1.5e-07
	mant, exp, _ := strings.Cut(s, "e")
	sign, digits := exp[:1], strings.TrimLeft(exp[1:], "0")
	return mant + "e" + sign + digits
}

func TestNumberAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		t.Helper()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return
		}
		got := string(appendNumber(nil, f))
		if want := referenceNumber(f); got != want {
			t.Fatalf("appendNumber(%016x) = %s, reference says %s", math.Float64bits(f), got, want)
		}
		if back, err := strconv.ParseFloat(got, 64); err != nil || back != f {
			t.Fatalf("%s does not round-trip to %016x: %v, %v", got, math.Float64bits(f), back, err)
		}
	}
	for range 200_000 {
		check(math.Float64frombits(r.Uint64()))                        // any exponent
		check(float64(r.Int64N(1<<60)-1<<59) / math.Pow10(r.IntN(30))) // decimal-looking
		check(float64(r.Int64()))                                      // integers
	}
	for e := -330; e <= 310; e++ { // powers of ten and their neighbours
		f, _ := strconv.ParseFloat("1e"+strconv.Itoa(e), 64)
		check(f)
		check(math.Nextafter(f, 0))
		check(math.Nextafter(f, math.Inf(1)))
		check(-f)
	}
}

func TestCompareUTF16(t *testing.T) {
	reference := func(a, b string) int {
		return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
	}
	sign := func(x int) int { return min(max(x, -1), 1) }
	alphabet := []rune{0, 'a', 'b', 0x7f, 0x80, 0xff, 0x100, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfb33, 0xffff, 0x10000, 0x1f600, 0x10ffff}
	r := rand.New(rand.NewPCG(3, 4))
	randString := func() string {
		rs := make([]rune, r.IntN(4))
		for i := range rs {
			rs[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(rs)
	}
	for range 100_000 {
		a, b := randString(), randString()
		if r.IntN(4) == 0 {
			b = a + b
		}
		if got, want := sign(compareUTF16([]byte(a), []byte(b))), reference(a, b); got != want {
			t.Fatalf("compareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
	}
}

func TestAppendStringEscapesExactly(t *testing.T) {
	// Every byte below 0x80 and a few above, one at a time.
	for c := range rune(0x80) {
		got := string(appendString(nil, []byte(string(c))))
		var want string
		switch c {
		case '"':
			want = `"\""`
		case '\\':
			want = `"\\"`
		case '\b':
			want = `"\b"`
		case '\t':
			want = `"\t"`
		case '\n':
			want = `"\n"`
		case '\f':
			want = `"\f"`
		case '\r':
			want = `"\r"`
		default:
			if c < 0x20 {
				want = `"\u00` + string(hexDigits[c>>4]) + string(hexDigits[c&0xf]) + `"`
			} else {
				want = `"` + string(c) + `"`
			}
		}
		if got != want {
			t.Errorf("appendString(%U) = %s, want %s", c, got, want)
		}
	}
	for _, c := range []rune{0x80, 0x2028, 0x2029, 0xfeff, 0xffff, 0x1f600} {
		if got, want := string(appendString(nil, []byte(string(c)))), `"`+string(c)+`"`; got != want || !utf8.ValidString(got) {
			t.Errorf("appendString(%U) = %q, want %q", c, got, want)
		}
	}
}

// TestTransformConcurrent runs Transform from many goroutines, as servers do;
// with -race it checks that the reused scratch buffers are not shared.
func TestTransformConcurrent(t *testing.T) {
	inputs := map[string]string{
		`{"b":{"d":[1,2],"c":"\u00e9"},"a":1.50}`: `{"a":1.5,"b":{"c":"é","d":[1,2]}}`,
		`{"z":"\n","y":{"x":{"w":null}}}`:         `{"y":{"x":{"w":null}},"z":"\n"}`,
		`[{"k":1,"k":2}]`:                         "",
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				for in, want := range inputs {
					got, err := Transform([]byte(in))
					if want == "" {
						if err == nil {
							t.Errorf("Transform(%s) succeeded", in)
						}
					} else if err != nil || string(got) != want {
						t.Errorf("Transform(%s) = %s, %v; want %s", in, got, err, want)
					}
				}
			}
		})
	}
	wg.Wait()
}
