// Package schema generates JSON Schemas (Draft 2020-12) from Go types and
// validates JSON instances against them.
//
// Generation uses github.com/invopop/jsonschema (struct tags such as
// `jsonschema:"enum=read,enum=write,minimum=1,description=..."`); validation
// uses github.com/santhosh-tekuri/jsonschema/v6. Schemas are self-contained:
// no $id, no $ref, no $defs, every type expanded inline.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/textproto"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	invopop "github.com/invopop/jsonschema"
	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a JSON Schema (Draft 2020-12) generated from a Go type, with
// its compiled validator. It is safe for concurrent use.
type Schema struct {
	doc       json.RawMessage
	validator *santhosh.Schema
}

// FieldError is one reason an instance is invalid.
type FieldError struct {
	Path    string `json:"path"`    // JSON Pointer into the instance; "" is the root
	Message string `json:"message"` // what is wrong, e.g. `must be >= 1`
}

// resourceURL names the schema inside the validator's compiler; it is never
// fetched and never appears in the document.
const resourceURL = "urn:idem:schema"

// For generates the schema of t (usually a struct or pointer to struct; any
// type encoding/json can represent is accepted) and compiles its validator.
// Recursive types and types JSON cannot carry (chan, func, complex) are errors.
func For(t reflect.Type) (s *Schema, err error) {
	if t == nil {
		return nil, errors.New("schema: nil type")
	}
	if err := checkType(t, t.String(), map[reflect.Type]bool{}, map[reflect.Type]bool{}); err != nil {
		return nil, fmt.Errorf("schema: %s: %w", t, err)
	}
	defer func() { // the reflector panics on what it cannot represent
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("schema: %s: %v", t, r)
		}
	}()

	// DoNotReference alone expands everything inline. ExpandedStruct is not
	// needed and is harmful: it looks the root up by bare type name, so a
	// nested type with the same name (e.g. http.Header inside a Header
	// struct) would replace the root.
	r := &invopop.Reflector{Anonymous: true, DoNotReference: true}
	root := r.ReflectFromType(t)
	annotateLocations(root, t)
	doc, err := json.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: marshal: %w", t, err)
	}

	s, err = compile(doc)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: %w", t, err)
	}
	return s, nil
}

// noLoader refuses every external schema.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is outside the document; only internal references (#/$defs/…) are followed", url)
}

// Compile compiles a JSON Schema (Draft 2020-12) document given as it is,
// such as one taken from an OpenAPI document; empty means {} (anything).
// References must be internal (#/$defs/…): nothing is fetched.
func Compile(doc json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		doc = json.RawMessage(`{}`)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s, err := compile(compact.Bytes())
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return s, nil
}

// Published is a schema document that is published and never validated
// against (a raw operation's output schema): it is checked to be JSON and
// compacted, not compiled, so that it costs its bytes and no validator.
// Validate on it panics.
func Published(doc json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		doc = json.RawMessage(`{}`)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return &Schema{doc: compact.Bytes()}, nil
}

// compile builds the validator of doc.
func compile(doc json.RawMessage) (*Schema, error) {
	v, err := santhosh.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("reparse: %w", err)
	}
	c := santhosh.NewCompiler()
	c.UseLoader(noLoader{}) // a $ref outside the document is an error, never a fetch
	c.DefaultDraft(santhosh.Draft2020)
	c.AssertFormat() // a date-time field rejects "tomorrow" here, not in the handler
	if err := c.AddResource(resourceURL, v); err != nil {
		return nil, err
	}
	validator, err := c.Compile(resourceURL)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	return &Schema{doc: doc, validator: validator}, nil
}

// JSON returns a copy of the schema document: compact, and byte-identical
// for the same type across runs and processes.
func (s *Schema) JSON() json.RawMessage { return slices.Clone(s.doc) }

// Requires reports whether the schema's top-level "required" lists name.
func (s *Schema) Requires(name string) bool {
	var doc struct {
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(s.doc, &doc)
	return slices.Contains(doc.Required, name)
}

// Validate checks one JSON instance and returns nil when it is valid.
// Errors are leaf causes only, sorted by path then message. An empty or
// unparsable instance yields one error at "".
func (s *Schema) Validate(instance []byte) []FieldError {
	errs, _ := s.ValidateCounted(instance)
	return errs
}

// ValidateCounted is Validate, with the number of errors found in all
// (more than len(errs) when the list was cut at MaxErrors).
func (s *Schema) ValidateCounted(instance []byte) (errs []FieldError, total int) {
	v, err := santhosh.UnmarshalJSON(bytes.NewReader(instance))
	if err != nil {
		return []FieldError{{Path: "", Message: "body is not valid JSON: " + syntaxMessage(err)}}, 1
	}
	if !numbersWithin(v) {
		return []FieldError{*checkNumbers(v, nil)}, 1
	}
	if s.validator == nil {
		panic("schema: Validate on a Published schema, which has no validator")
	}
	err = s.validator.Validate(v)
	if err == nil {
		return nil, 0
	}
	var ve *santhosh.ValidationError
	if !errors.As(err, &ve) {
		return []FieldError{{Path: "", Message: err.Error()}}, 1
	}
	var found []cause
	collect(ve, &found)
	return render(found)
}

// MaxErrors bounds the errors Validate returns: an instance with more (a
// list of 250,000 items off an enum, say) gets the first MaxErrors by path,
// and ValidateCounted says how many there were in all, so that neither
// the answer nor the memory spent on it grows with the instance.
const MaxErrors = 100

// A cause is one leaf of the validator's error tree, its message not yet
// rendered (fixed when collect already wrote it).
type cause struct {
	path  string
	e     *santhosh.ValidationError
	fixed *FieldError
}

// render renders the first MaxErrors causes in path order (then message
// order), and counts the rest without rendering them.
func render(found []cause) ([]FieldError, int) {
	slices.SortStableFunc(found, func(a, b cause) int { return strings.Compare(a.path, b.path) })
	var out []FieldError
	rest := 0
	for _, c := range found {
		if len(out) >= MaxErrors {
			rest += c.count()
			continue
		}
		if c.fixed != nil {
			out = append(out, *c.fixed)
		} else {
			out = append(out, leaf(c.e)...)
		}
	}
	slices.SortFunc(out, func(a, b FieldError) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	out = slices.Compact(out)
	if len(out) > MaxErrors {
		rest += len(out) - MaxErrors
		out = out[:MaxErrors]
	}
	return out, len(out) + rest
}

// count is how many errors c renders to, without rendering them.
func (c cause) count() int {
	if c.fixed != nil {
		return 1
	}
	switch k := c.e.ErrorKind.(type) {
	case *kind.Required:
		return len(k.Missing)
	case *kind.AdditionalProperties:
		return len(k.Properties)
	case *kind.DependentRequired:
		return len(k.Missing)
	}
	return 1
}

func syntaxMessage(err error) string {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of input"
	case errors.As(err, &se):
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

// Limits on instance numbers. The validator turns each number into a
// big.Rat: a 1 MiB integer literal costs ~2s, 1e999999 ~20ms, and past an
// effective exponent of 1e6 math/big gives up and the validator
// dereferences nil (a panic). Far beyond anything a Go field can hold.
const (
	maxNumberLen = 1000
	maxExponent  = 1000
)

// numbersWithin reports whether every number of v is within the limits.
// It allocates nothing: on the common path no error needs a path or an
// order (checkNumbers, run only when this fails, finds the first).
func numbersWithin(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return numberProblem(v) == ""
	case []any:
		for _, e := range v {
			if !numbersWithin(e) {
				return false
			}
		}
	case map[string]any:
		for _, e := range v {
			if !numbersWithin(e) {
				return false
			}
		}
	}
	return true
}

// numberProblem says why n is beyond the limits, "" when it is not.
func numberProblem(n json.Number) string {
	if len(n) > maxNumberLen {
		return fmt.Sprintf("number is too long (over %d characters)", maxNumberLen)
	}
	if i := strings.IndexAny(string(n), "eE"); i >= 0 {
		e, err := strconv.Atoi(string(n[i+1:]))
		if err != nil || e > maxExponent || e < -maxExponent {
			return fmt.Sprintf("number is out of range (exponent beyond ±%d)", maxExponent)
		}
	}
	return ""
}

// checkNumbers reports the first number (in key order) beyond the limits.
func checkNumbers(v any, path []string) *FieldError {
	switch v := v.(type) {
	case json.Number:
		if msg := numberProblem(v); msg != "" {
			return &FieldError{Path: pointer(path), Message: msg}
		}
	case []any:
		for i, e := range v {
			if fe := checkNumbers(e, append(path, strconv.Itoa(i))); fe != nil {
				return fe
			}
		}
	case map[string]any:
		// Visit keys in order so the reported error is deterministic.
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if fe := checkNumbers(v[k], append(path, k)); fe != nil {
				return fe
			}
		}
	}
	return nil
}

// collect appends the leaf causes of e to out.
func collect(e *santhosh.ValidationError, out *[]cause) {
	if len(e.Causes) == 0 {
		*out = append(*out, cause{path: pointer(e.InstanceLocation), e: e})
		return
	}
	switch k := e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		collectAlternatives(e, out)
		return
	case *kind.PropertyNames:
		at := pointer(e.InstanceLocation)
		*out = append(*out, cause{path: at, fixed: &FieldError{Path: at, Message: fmt.Sprintf("property name %s is not allowed", strconv.Quote(k.Property))}})
		return
	}
	for _, c := range e.Causes {
		collect(c, out)
	}
}

// collectAlternatives reports an anyOf/oneOf that nothing matched. Branches
// that failed only on type are dropped when another branch got the type
// right (that is the one the caller meant); when all failed on type, one
// message lists every accepted type ("must be integer or null, got string").
func collectAlternatives(e *santhosh.ValidationError, out *[]cause) {
	var want []string
	var got string
	var others []*santhosh.ValidationError
	for _, c := range e.Causes {
		if t, ok := c.ErrorKind.(*kind.Type); ok && len(c.Causes) == 0 && slices.Equal(c.InstanceLocation, e.InstanceLocation) {
			got = t.Got
			for _, w := range t.Want {
				if !slices.Contains(want, w) {
					want = append(want, w)
				}
			}
			continue
		}
		others = append(others, c)
	}
	if len(others) > 0 {
		for _, c := range others {
			collect(c, out)
		}
		return
	}
	at := pointer(e.InstanceLocation)
	*out = append(*out, cause{path: at, fixed: &FieldError{Path: at, Message: typeMessage(want, got)}})
}

var printer = message.NewPrinter(language.English)

// maxListedValues bounds the values an enum's message lists.
const maxListedValues = 10

// leaf renders one leaf cause; required and additionalProperties give one
// error per property.
func leaf(e *santhosh.ValidationError) []FieldError {
	at := pointer(e.InstanceLocation)
	one := func(format string, args ...any) []FieldError {
		return []FieldError{{Path: at, Message: fmt.Sprintf(format, args...)}}
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return one("%s", typeMessage(k.Want, k.Got))
	case *kind.Enum:
		if len(k.Want) == 1 {
			return one("value must be %s", jsonText(k.Want[0]))
		}
		vals := make([]string, 0, min(len(k.Want), maxListedValues))
		for _, w := range k.Want[:min(len(k.Want), maxListedValues)] {
			vals = append(vals, jsonText(w))
		}
		if len(k.Want) > maxListedValues {
			return one("value must be one of %s, … (%d values in all; the schema lists them)", strings.Join(vals, ", "), len(k.Want))
		}
		return one("value must be one of %s", strings.Join(vals, ", "))
	case *kind.Const:
		return one("value must be %s", jsonText(k.Want))
	case *kind.Required:
		var out []FieldError
		for _, p := range k.Missing {
			out = append(out, FieldError{Path: at, Message: "missing property " + strconv.Quote(p)})
		}
		return out
	case *kind.AdditionalProperties:
		var out []FieldError
		for _, p := range k.Properties {
			out = append(out, FieldError{Path: at, Message: fmt.Sprintf("additional property %s is not allowed", strconv.Quote(p))})
		}
		return out
	case *kind.DependentRequired:
		var out []FieldError
		for _, p := range k.Missing {
			out = append(out, FieldError{Path: at, Message: fmt.Sprintf("missing property %s, required when %s is present", strconv.Quote(p), strconv.Quote(k.Prop))})
		}
		return out
	case *kind.Minimum:
		return one("must be >= %s", ratText(k.Want))
	case *kind.Maximum:
		return one("must be <= %s", ratText(k.Want))
	case *kind.ExclusiveMinimum:
		return one("must be > %s", ratText(k.Want))
	case *kind.ExclusiveMaximum:
		return one("must be < %s", ratText(k.Want))
	case *kind.MultipleOf:
		return one("must be a multiple of %s", ratText(k.Want))
	case *kind.MinLength:
		return one("must be at least %s long", plural(k.Want, "character"))
	case *kind.MaxLength:
		return one("must be at most %s long", plural(k.Want, "character"))
	case *kind.Pattern:
		return one("must match pattern %s", strconv.Quote(k.Want))
	case *kind.Format:
		if hint, ok := formatHints[k.Want]; ok {
			return one("must be a valid %s (%s)", k.Want, hint)
		}
		return one("must be a valid %s", k.Want)
	case *kind.MinItems:
		return one("must have at least %s", plural(k.Want, "item"))
	case *kind.MaxItems:
		return one("must have at most %s", plural(k.Want, "item"))
	case *kind.UniqueItems:
		return one("items %d and %d are equal; items must be unique", k.Duplicates[0], k.Duplicates[1])
	case *kind.MinProperties:
		return one("must have at least %s", plural(k.Want, "property"))
	case *kind.MaxProperties:
		return one("must have at most %s", plural(k.Want, "property"))
	case *kind.FalseSchema:
		return one("no value is allowed here")
	case *kind.OneOf: // a leaf only when several alternatives matched
		if len(k.Subschemas) < 2 {
			break
		}
		return one("matches more than one alternative (%d and %d); must match exactly one", k.Subschemas[0], k.Subschemas[1])
	}
	return one("%s", e.ErrorKind.LocalizedString(printer))
}

var formatHints = map[string]string{
	"date-time": "RFC 3339, e.g. 2006-01-02T15:04:05Z",
	"date":      "e.g. 2006-01-02",
}

func typeMessage(want []string, got string) string {
	return fmt.Sprintf("must be %s, got %s", strings.Join(want, " or "), got)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, noun[:len(noun)-1])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// ratText prints a schema bound as written: exact for integers, shortest
// float form otherwise.
func ratText(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// jsonText renders an enum/const value as JSON ("read", 3, null).
func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer builds an RFC 6901 JSON Pointer from reference tokens.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

var (
	timeType        = reflect.TypeFor[time.Time]()
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	customSchema    = reflect.TypeFor[interface{ JSONSchema() *invopop.Schema }]()
	aliasSchemaType = reflect.TypeFor[interface{ JSONSchemaAlias() any }]()
)

// checkType walks t the way the reflector will (same fields, same special
// types) and reports what it cannot expand inline: unsupported kinds, which
// the reflector panics on, and recursion, which with DoNotReference would
// recurse until the process dies. where names the position for messages.
func checkType(t reflect.Type, where string, visiting, done map[reflect.Type]bool) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if done[t] || t == timeType || t == rawMessageType || t.Implements(customSchema) {
		return nil
	}
	if t.Implements(aliasSchemaType) {
		alias := reflect.TypeOf(reflect.New(t).Interface().(interface{ JSONSchemaAlias() any }).JSONSchemaAlias())
		if alias == nil {
			return fmt.Errorf("%s.JSONSchemaAlias returned nil at %s", t, where)
		}
		return checkType(alias, where, visiting, done)
	}
	if visiting[t] {
		return fmt.Errorf("recursive type %s at %s cannot be expanded inline", t, where)
	}
	visiting[t] = true
	defer delete(visiting, t)

	switch t.Kind() {
	case reflect.Bool, reflect.String, reflect.Interface,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
	case reflect.Slice, reflect.Array, reflect.Map:
		if err := checkType(t.Elem(), where+"[]", visiting, done); err != nil {
			return err
		}
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			schemaName, _, _ := strings.Cut(f.Tag.Get("jsonschema"), ",")
			if name == "-" || schemaName == "-" || (!f.Anonymous && !f.IsExported()) {
				continue
			}
			if err := checkType(f.Type, where+"."+f.Name, visiting, done); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unsupported type %s at %s: JSON Schema cannot represent it", t, where)
	}
	done[t] = true
	return nil
}

// LocationKeyword annotates an argument that does not travel in the JSON
// body: "path", "query" or "header" (from the field's in:"…" tag).
// Validators ignore it; clients read it to place each argument of a flat
// call.
const LocationKeyword = "x-idem-in"

// HeaderKeyword names the HTTP header of a header argument (from the
// field's header:"…" tag, in canonical form), beside LocationKeyword.
const HeaderKeyword = "x-idem-header"

// annotateLocations marks the top-level properties of a struct whose
// fields carry an in:"path" or in:"query" tag.
func annotateLocations(root *invopop.Schema, t reflect.Type) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || root.Properties == nil {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		in := f.Tag.Get("in")
		if in == "" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if prop, ok := root.Properties.Get(name); ok && prop != nil {
			if prop.Extras == nil {
				prop.Extras = map[string]any{}
			}
			prop.Extras[LocationKeyword] = in
			if h := f.Tag.Get("header"); in == "header" && h != "" {
				prop.Extras[HeaderKeyword] = textproto.CanonicalMIMEHeaderKey(h)
			}
		}
	}
}
