package schema

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

type simulate struct {
	DelayMs int  `json:"delayMs" jsonschema:"minimum=0,maximum=60000"`
	Fail    bool `json:"fail,omitempty"`
}

type grant struct {
	Name  string `json:"name" jsonschema:"minLength=1"`
	Scope string `json:"scope" jsonschema:"enum=read,enum=write,enum=admin"`
}

// createInput is the representative type of the golden file; its in:"path"
// and in:"query" tags must not change generation.
type createInput struct {
	Slug     string            `json:"slug" in:"path" jsonschema:"pattern=^[a-z0-9-]+$,description=URL-safe business identifier"`
	Verbose  bool              `json:"verbose,omitempty" in:"query"`
	Amount   int64             `json:"amount" jsonschema:"minimum=1"`
	Ratio    float64           `json:"ratio,omitempty" jsonschema:"exclusiveMinimum=0,maximum=1"`
	Scopes   []string          `json:"scopes,omitempty" jsonschema:"enum=read,enum=write,enum=admin"`
	Grants   []grant           `json:"grants,omitempty"`
	Simulate *simulate         `json:"simulate,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	At       time.Time         `json:"at,omitzero"`
	Meta     json.RawMessage   `json:"meta,omitempty"`
	Note     *string           `json:"note,omitempty" jsonschema:"maxLength=3"`
	Limit    *int              `json:"limit,omitempty" jsonschema:"nullable,minimum=1"`
	Ignored  string            `json:"-"`
	internal int
}

func mustFor(t testing.TB, typ reflect.Type) *Schema {
	t.Helper()
	s, err := For(typ)
	if err != nil {
		t.Fatalf("For(%s): %v", typ, err)
	}
	return s
}

func TestValidate(t *testing.T) {
	s := mustFor(t, reflect.TypeFor[createInput]())
	tests := []struct {
		name  string
		input string
		want  []FieldError
	}{
		{"valid minimal", `{"slug":"acme","amount":1}`, nil},
		{"valid full", `{"slug":"acme","verbose":true,"amount":5,"ratio":0.5,"scopes":["read","admin"],
			"grants":[{"name":"ops","scope":"write"}],"simulate":{"delayMs":100},"labels":{"env":"prod"},
			"at":"2025-01-02T03:04:05Z","meta":[1,{"x":null}],"note":"abc","limit":null}`, nil},
		{"empty object: required", `{}`, []FieldError{
			{"", `missing property "amount"`},
			{"", `missing property "slug"`},
		}},
		{"empty body", ``, []FieldError{{"", "body is not valid JSON: unexpected end of input"}}},
		{"whitespace body", " \n", []FieldError{{"", "body is not valid JSON: unexpected end of input"}}},
		{"truncated", `{"slug":`, []FieldError{{"", "body is not valid JSON: unexpected end of input"}}},
		{"garbage", `{"slug":x}`, []FieldError{{"", "body is not valid JSON: invalid character 'x' looking for beginning of value (at byte 9)"}}},
		{"trailing data", `{} {}`, []FieldError{{"", "body is not valid JSON: invalid character after top-level value"}}},
		{"root array", `[]`, []FieldError{{"", "must be object, got array"}}},
		{"root null", `null`, []FieldError{{"", "must be object, got null"}}},
		{"wrong type", `{"slug":"a","amount":"5"}`, []FieldError{{"/amount", "must be integer, got string"}}},
		{"fraction for integer", `{"slug":"a","amount":1.5}`, []FieldError{{"/amount", "must be integer, got number"}}},
		{"1.0 is an integer", `{"slug":"a","amount":1.0}`, nil},
		{"huge integer exact", `{"slug":"a","amount":123456789012345678901234567890}`, nil},
		{"huge negative integer", `{"slug":"a","amount":-123456789012345678901234567890}`, []FieldError{{"/amount", "must be >= 1"}}},
		{"exponent integer", `{"slug":"a","amount":1e3}`, nil},
		{"exponent out of range", `{"slug":"a","amount":1e1000001}`, []FieldError{{"/amount", "number is out of range (exponent beyond ±1000)"}}},
		{"long fraction out of range", `{"slug":"a","amount":1,"ratio":0.` + strings.Repeat("0", 2000) + `1e1000}`, []FieldError{{"/ratio", "number is too long (over 1000 characters)"}}},
		{"first bad number in key order", `{"slug":"a","amount":1e2000,"meta":[1e-2000]}`, []FieldError{{"/amount", "number is out of range (exponent beyond ±1000)"}}},
		{"minimum", `{"slug":"a","amount":0}`, []FieldError{{"/amount", "must be >= 1"}}},
		{"exclusive minimum", `{"slug":"a","amount":1,"ratio":0}`, []FieldError{{"/ratio", "must be > 0"}}},
		{"maximum", `{"slug":"a","amount":1,"ratio":1.25}`, []FieldError{{"/ratio", "must be <= 1"}}},
		{"enum", `{"slug":"a","amount":1,"scopes":["read","root"]}`, []FieldError{{"/scopes/1", `value must be one of "read", "write", "admin"`}}},
		{"pattern", `{"slug":"Bad Slug","amount":1}`, []FieldError{{"/slug", `must match pattern "^[a-z0-9-]+$"`}}},
		{"max length", `{"slug":"a","amount":1,"note":"abcd"}`, []FieldError{{"/note", "must be at most 3 characters long"}}},
		{"nested path", `{"slug":"a","amount":1,"simulate":{"delayMs":-1}}`, []FieldError{{"/simulate/delayMs", "must be >= 0"}}},
		{"nested missing", `{"slug":"a","amount":1,"simulate":{}}`, []FieldError{{"/simulate", `missing property "delayMs"`}}},
		{"pointer is not nullable", `{"slug":"a","amount":1,"simulate":null}`, []FieldError{{"/simulate", "must be object, got null"}}},
		{"nullable wrong type", `{"slug":"a","amount":1,"limit":"x"}`, []FieldError{{"/limit", "must be integer or null, got string"}}},
		{"nullable below minimum", `{"slug":"a","amount":1,"limit":0}`, []FieldError{{"/limit", "must be >= 1"}}},
		{"array item path", `{"slug":"a","amount":1,"grants":[{"name":"ok","scope":"read"},{"scope":"own"}]}`, []FieldError{
			{"/grants/1", `missing property "name"`},
			{"/grants/1/scope", `value must be one of "read", "write", "admin"`},
		}},
		{"array item min length", `{"slug":"a","amount":1,"grants":[{"name":"","scope":"read"}]}`, []FieldError{{"/grants/0/name", "must be at least 1 character long"}}},
		{"additional property", `{"slug":"a","amount":1,"foo":1,"bar":2}`, []FieldError{
			{"", `additional property "bar" is not allowed`},
			{"", `additional property "foo" is not allowed`},
		}},
		{"nested additional property", `{"slug":"a","amount":1,"simulate":{"delayMs":1,"x":true}}`, []FieldError{{"/simulate", `additional property "x" is not allowed`}}},
		{"json:\"-\" field is unknown", `{"slug":"a","amount":1,"Ignored":"x"}`, []FieldError{{"", `additional property "Ignored" is not allowed`}}},
		{"map value, escaped key", `{"slug":"a","amount":1,"labels":{"a/b~c":1}}`, []FieldError{{"/labels/a~1b~0c", "must be string, got number"}}},
		{"date-time format", `{"slug":"a","amount":1,"at":"tomorrow"}`, []FieldError{{"/at", "must be a valid date-time (RFC 3339, e.g. 2006-01-02T15:04:05Z)"}}},
		{"raw message takes any JSON", `{"slug":"a","amount":1,"meta":"text"}`, nil},
		{"several errors sorted", `{"amount":"x","simulate":{"delayMs":1.5},"zzz":0}`, []FieldError{
			{"", `additional property "zzz" is not allowed`},
			{"", `missing property "slug"`},
			{"/amount", "must be integer, got string"},
			{"/simulate/delayMs", "must be integer, got number"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Validate([]byte(tt.input))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate(%s)\n got %q\nwant %q", tt.input, got, tt.want)
			}
		})
	}
}

type (
	node    struct{ Children []node }
	embedMe struct{ *embedMe }
	Header  struct {
		H http.Header `json:"h"`
	}
	withChan struct {
		C chan int `json:"c"`
	}
	skippedChan struct {
		C    chan int `json:"-"`
		c    chan int
		Name string `json:"name"`
	}
)

func TestFor(t *testing.T) {
	tests := []struct {
		name    string
		typ     reflect.Type
		want    string // compact schema; checked when set
		wantErr string // substring of the error; "" means success
	}{
		{"struct", reflect.TypeFor[simulate](), `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"delayMs":{"type":"integer","maximum":60000,"minimum":0},"fail":{"type":"boolean"}},"additionalProperties":false,"type":"object","required":["delayMs"]}`, ""},
		{"pointer to struct", reflect.TypeFor[*simulate](), `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"delayMs":{"type":"integer","maximum":60000,"minimum":0},"fail":{"type":"boolean"}},"additionalProperties":false,"type":"object","required":["delayMs"]}`, ""},
		{"slice of structs", reflect.TypeFor[[]grant](), `{"$schema":"https://json-schema.org/draft/2020-12/schema","items":{"properties":{"name":{"type":"string","minLength":1},"scope":{"type":"string","enum":["read","write","admin"]}},"additionalProperties":false,"type":"object","required":["name","scope"]},"type":"array"}`, ""},
		{"map", reflect.TypeFor[map[string]int](), `{"$schema":"https://json-schema.org/draft/2020-12/schema","additionalProperties":{"type":"integer"},"type":"object"}`, ""},
		{"time", reflect.TypeFor[time.Time](), `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"string","format":"date-time"}`, ""},
		{"raw message", reflect.TypeFor[json.RawMessage](), `{"$schema":"https://json-schema.org/draft/2020-12/schema"}`, ""},
		{"name clash with nested type stays the root", reflect.TypeFor[Header](), `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"h":{"additionalProperties":{"items":{"type":"string"},"type":"array"},"type":"object"}},"additionalProperties":false,"type":"object","required":["h"]}`, ""},
		{"skipped chan fields", reflect.TypeFor[skippedChan](), `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"name":{"type":"string"}},"additionalProperties":false,"type":"object","required":["name"]}`, ""},
		{"golden type", reflect.TypeFor[createInput](), "", ""},
		{"nil", nil, "", "nil type"},
		{"chan", reflect.TypeFor[chan int](), "", "unsupported type chan int"},
		{"func", reflect.TypeFor[func()](), "", "unsupported type func()"},
		{"chan field", reflect.TypeFor[withChan](), "", "unsupported type chan int at schema.withChan.C"},
		{"complex in slice", reflect.TypeFor[[]complex128](), "", "unsupported type complex128"},
		{"recursive", reflect.TypeFor[node](), "", "recursive type schema.node at schema.node.Children[]"},
		{"recursive embedded", reflect.TypeFor[embedMe](), "", "recursive type schema.embedMe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := For(tt.typ)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("For(%v) error = %v, want it to contain %q", tt.typ, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("For(%v): %v", tt.typ, err)
			}
			doc := string(s.JSON())
			if tt.want != "" && doc != tt.want {
				t.Errorf("For(%v)\n got %s\nwant %s", tt.typ, doc, tt.want)
			}
			for _, banned := range []string{`"$id"`, `"$ref"`, `"$defs"`} {
				if strings.Contains(doc, banned) {
					t.Errorf("schema contains %s: %s", banned, doc)
				}
			}
			if !strings.HasPrefix(doc, `{"$schema":"https://json-schema.org/draft/2020-12/schema"`) {
				t.Errorf("schema does not start with $schema: %s", doc)
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, s.JSON()); err != nil || buf.String() != doc {
				t.Errorf("schema is not compact JSON (err %v)", err)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	first := mustFor(t, reflect.TypeFor[createInput]()).JSON()
	for range 20 { // map iteration order changes between calls
		if again := mustFor(t, reflect.TypeFor[createInput]()).JSON(); !bytes.Equal(first, again) {
			t.Fatalf("schema changed between generations:\n%s\n%s", first, again)
		}
	}
}

// TestGolden pins the document across processes and library upgrades.
// Regenerate with: go test ./internal/schema/ -run TestGolden -update
func TestGolden(t *testing.T) {
	got := append(mustFor(t, reflect.TypeFor[createInput]()).JSON(), '\n')
	path := filepath.Join("testdata", "create_input.schema.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("schema differs from %s (run with -update if intended)\n got %s\nwant %s", path, got, want)
	}
}

func TestValidateConcurrent(t *testing.T) {
	s := mustFor(t, reflect.TypeFor[createInput]())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got := s.Validate([]byte(`{"slug":"a","amount":0}`)); len(got) != 1 {
					t.Errorf("got %v", got)
				}
			}
		})
	}
	wg.Wait()
}

func FuzzValidate(f *testing.F) {
	s := mustFor(f, reflect.TypeFor[createInput]())
	for _, seed := range []string{``, `{}`, `{"slug":"a","amount":1}`, `{"grants":[{"scope":1}]}`, `{"amount":1e999}`, `[1,"x",null]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		errs := s.Validate(in)
		sorted := slices.IsSortedFunc(errs, func(a, b FieldError) int {
			if c := strings.Compare(a.Path, b.Path); c != 0 {
				return c
			}
			return strings.Compare(a.Message, b.Message)
		})
		if !sorted {
			t.Errorf("errors not sorted: %q", errs)
		}
		for _, e := range errs {
			if e.Path != "" && !strings.HasPrefix(e.Path, "/") || e.Message == "" {
				t.Errorf("bad error %q", e)
			}
		}
	})
}

func BenchmarkValidate(b *testing.B) {
	s := mustFor(b, reflect.TypeFor[grant]())
	valid := []byte(`{"name":"ops","scope":"write"}`)
	invalid := []byte(`{"name":"","scope":"root","extra":1}`)
	b.Run("valid", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if errs := s.Validate(valid); errs != nil {
				b.Fatal(errs)
			}
		}
	})
	b.Run("invalid", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if errs := s.Validate(invalid); len(errs) != 3 {
				b.Fatal(errs)
			}
		}
	})
}

// hugeOffEnum is a body of n list items, none of them in the enum.
func hugeOffEnum(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"x"`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

const listOfEnum = `{"type":"object","properties":{"items":{"type":"array","items":{"enum":["a","b","c","d","e","f","g","h","i","j","k","l"]}}}}`

// TestValidateBoundsItsErrors: an instance with far more errors than an
// answer can use gets MaxErrors of them, first by path, and one that
// counts the rest; an enum's message lists at most ten values (issue 28,
// item 12: 250,000 off-enum items made a quarter of a million messages,
// each listing the whole enum).
func TestValidateBoundsItsErrors(t *testing.T) {
	s, err := Compile(json.RawMessage(listOfEnum))
	if err != nil {
		t.Fatal(err)
	}
	const n = 250_000
	errs, total := s.ValidateCounted(hugeOffEnum(n))
	if len(errs) != MaxErrors || total != n {
		t.Fatalf("%d errors of %d; want %d of %d", len(errs), total, MaxErrors, n)
	}
	if errs[0].Path != "/items/0" || !strings.Contains(errs[0].Message, `"j", … (12 values in all`) || strings.Contains(errs[0].Message, `"k"`) {
		t.Fatalf("the first error is %+v", errs[0])
	}
	if few := s.Validate(hugeOffEnum(3)); len(few) != 3 {
		t.Fatalf("3 items off the enum: %v", few)
	}
}

// BenchmarkValidateManyErrors reports what validating 250,000 off-enum
// items costs (the validator's own error tree, then MaxErrors messages).
func BenchmarkValidateManyErrors(b *testing.B) {
	s, err := Compile(json.RawMessage(listOfEnum))
	if err != nil {
		b.Fatal(err)
	}
	body := hugeOffEnum(250_000)
	b.ReportAllocs()
	for b.Loop() {
		if len(s.Validate(body)) != MaxErrors {
			b.Fatal("not bounded")
		}
	}
}

// TestValidateAllocatesNoMoreThanTheValidator holds Validate of a valid
// instance to the allocations of the validator's own reading and
// validation: the number limits' check (checkNumbers) adds none, its
// paths and key order made only for an instance that breaks a limit.
func TestValidateAllocatesNoMoreThanTheValidator(t *testing.T) {
	s := mustFor(t, reflect.TypeFor[createInput]())
	inst := []byte(`{"slug":"acme","amount":5,"ratio":0.5,"scopes":["read","admin"],"grants":[{"name":"a","scope":"read"}],"simulate":{"delayMs":1e3},"labels":{"b":"x","a":"y"}}`)
	if errs := s.Validate(inst); errs != nil {
		t.Fatal(errs)
	}
	own := testing.AllocsPerRun(200, func() {
		v, _ := santhosh.UnmarshalJSON(bytes.NewReader(inst))
		_ = s.validator.Validate(v)
	})
	if got := testing.AllocsPerRun(200, func() { s.Validate(inst) }); got > own {
		t.Errorf("Validate allocates %v times per valid instance, the validator %v: %v more", got, own, got-own)
	}
}
