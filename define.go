package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/idem-run/idem/internal/schema"
)

// Handler runs one attempt of an operation. ctx carries the call's
// deadline, cancellation and Call; the handler must pass ctx and
// call.IdempotencyKey on to whatever it calls downstream.
type Handler[In, Out any] func(ctx context.Context, call *Call, in In) (Out, error)

// PreviewHandler answers a dry run (dryRun=true) without changing anything.
type PreviewHandler[In any] func(ctx context.Context, call *Call, in In) (any, error)

// Op is an operation with Go input and output types. Define makes one.
type Op[In, Out any] struct {
	meta     Metadata
	handler  Handler[In, Out]
	preview  PreviewHandler[In]
	policies []Policy
}

// Define declares an operation: its metadata (SPEC §3) and its handler.
// The input and output JSON Schemas are generated from In and Out. In is a
// struct whose fields are the operation's flat arguments: a field tagged
// in:"path" fills the route's {name} segment, in:"query" a query parameter,
// and every other field travels in the JSON body.
func Define[In, Out any](meta Metadata, handler Handler[In, Out]) *Op[In, Out] {
	return &Op[In, Out]{meta: meta, handler: handler}
}

// WithPreview adds the dry-run implementation that retry.preview: true
// requires.
func (o *Op[In, Out]) WithPreview(preview PreviewHandler[In]) *Op[In, Out] {
	o.preview = preview
	return o
}

// WithPolicies adds policies evaluated for this operation only.
func (o *Op[In, Out]) WithPolicies(policies ...Policy) *Op[In, Out] {
	o.policies = append(o.policies, policies...)
	return o
}

// Metadata returns the declaration as given (before defaults).
func (o *Op[In, Out]) Metadata() Metadata { return o.meta }

// Operation is a declared operation of any input and output types.
type Operation interface {
	Metadata() Metadata
	compile() (*compiled, error)
}

// Param is one flat argument of an operation and where it travels.
type Param struct {
	Name string
	// In is "path", "query" or "body".
	In string
	// Type is the JSON Schema type of a path or query parameter's value
	// (string, integer, number, boolean): what its string is read as. A
	// typed operation's comes from its field; a raw one declares it.
	Type string `json:"-"`
	kind reflect.Kind
}

// compiled is the non-generic form of an operation the runner executes.
type compiled struct {
	meta     Metadata
	params   []Param
	input    *schema.Schema
	output   *schema.Schema
	policies []Policy
	decode   func(raw []byte) (any, error)
	invoke   func(ctx context.Context, call *Call, in any) (any, error)
	preview  func(ctx context.Context, call *Call, in any) (any, error)
	// raw is set for a raw operation (DefineRaw): its input is the
	// request, its answer the handler's own.
	raw *RawSpec
}

func (o *Op[In, Out]) compile() (*compiled, error) {
	meta := o.meta.WithDefaults()
	if o.handler == nil {
		return nil, fmt.Errorf("operation %q: no handler", meta.Name)
	}
	inType, outType := reflect.TypeFor[In](), reflect.TypeFor[Out]()
	input, err := schema.For(inType)
	if err != nil {
		return nil, fmt.Errorf("operation %q: input schema: %w", meta.Name, err)
	}
	output, err := schema.For(outType)
	if err != nil {
		return nil, fmt.Errorf("operation %q: output schema: %w", meta.Name, err)
	}
	params, err := paramsOf(inType)
	if err != nil {
		return nil, fmt.Errorf("operation %q: %w", meta.Name, err)
	}
	c := &compiled{
		meta: meta, params: params, input: input, output: output, policies: o.policies,
		decode: func(raw []byte) (any, error) {
			var in In
			err := json.Unmarshal(raw, &in)
			return in, err
		},
		invoke: func(ctx context.Context, call *Call, in any) (any, error) {
			return o.handler(ctx, call, in.(In))
		},
	}
	if o.preview != nil {
		c.preview = func(ctx context.Context, call *Call, in any) (any, error) {
			return o.preview(ctx, call, in.(In))
		}
	}
	return c, nil
}

// paramsOf lists the flat arguments of an input struct type.
func paramsOf(t reflect.Type) ([]Param, error) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("input type %s must be a struct (its fields are the arguments)", t)
	}
	var out []Param
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous {
			return nil, fmt.Errorf("input field %s: embedded structs are not supported; name the field", f.Name)
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		in := f.Tag.Get("in")
		switch in {
		case "":
			in = "body"
		case "path", "query":
			if !scalarKind(f.Type.Kind()) {
				return nil, fmt.Errorf("input field %s: a %s parameter must be a string, number or boolean, not %s", f.Name, in, f.Type)
			}
		default:
			return nil, fmt.Errorf("input field %s: in:%q is not one of path, query", f.Name, in)
		}
		p := Param{Name: name, In: in, kind: f.Type.Kind()}
		if in != "body" {
			p.Type = schemaType(p.kind)
		}
		out = append(out, p)
	}
	return out, nil
}

// schemaType names a scalar kind's JSON Schema type.
func schemaType(k reflect.Kind) string {
	switch {
	case k == reflect.String:
		return "string"
	case k == reflect.Bool:
		return "boolean"
	case k == reflect.Float32 || k == reflect.Float64:
		return "number"
	}
	return "integer"
}

func scalarKind(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}
