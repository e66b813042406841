package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"net/textproto"
	"reflect"
	"strings"

	"github.com/idem-run/idem/internal/schema"
)

// Handler runs one attempt of an operation. ctx carries the call's
// deadline, cancellation and Call; the handler must pass ctx and
// call.IdempotencyKey on to whatever it calls downstream.
//
// ctx is derived from the context the surface passed to Runner.Call (the
// HTTP request's r.Context(), the MCP call's context, the Go caller's
// ctx), so it carries that context's values (a trace span, a logger, what
// a middleware stored). It ends at the attempt's deadline (its timeout, or
// LeaseMargin before the end of the lease for a keyed call), or earlier if
// the caller's context has an earlier deadline. It is cancelled when the
// caller's context is, except for a keyed HTTP call once its key is
// reserved: the pipeline then detaches it (context.WithoutCancel, which
// keeps the values and drops the caller's deadline), so that a dropped connection does not cut the
// handler off and a same-key retry finds the result (SPEC §7). The
// request's headers are not in ctx; a header the handler needs is
// declared as an input field (in:"header", see Define).
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
// in:"header" with header:"Name" a request header, and every other field
// travels in the JSON body. A field's argument name is its JSON name on
// every surface; only over HTTP does a header argument travel as the
// header, for example
//
//	Tenant string `json:"tenant" in:"header" header:"X-Tenant"`
//
// is the argument tenant (MCP, CLI, the input schema) and the header
// X-Tenant over HTTP. Header names are case-insensitive (stored in
// canonical form); a header is given at most once; its value is read as
// the field's type like a query parameter's; it is part of the
// fingerprint. Headers that idem or HTTP itself owns (Idempotency-Key,
// Authorization, Content-Type, Prefer, traceparent, …: ReservedHeader)
// cannot be inputs, and NewRegistry refuses them. Headers that are not
// declared never reach the handler.
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
	compile() (*Compiled, error)
}

// Param is one flat argument of an operation and where it travels.
type Param struct {
	Name string
	// In is "path", "query", "header" or "body".
	In string
	// Header is the canonical name of a header argument's HTTP header
	// (X-Tenant); empty for the others.
	Header string `json:"-"`
	// Type is the JSON Schema type of a path or query parameter's value
	// (string, integer, number, boolean): what its string is read as. A
	// typed operation's comes from its field; a raw one declares it.
	Type string `json:"-"`
	kind reflect.Kind
}

// Compiled is a registered operation in the form the engine (package
// pipeline) runs it: its metadata, flat arguments, schemas, policies and
// handlers, checked by NewRegistry. Its accessors are read-only views.
type Compiled struct {
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

func (o *Op[In, Out]) compile() (*Compiled, error) {
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
	c := &Compiled{
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
	headers := map[string]string{}
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
		header, hasHeader := f.Tag.Lookup("header")
		if hasHeader && in != "header" {
			return nil, fmt.Errorf("input field %s: a header:%q tag needs in:\"header\" beside it", f.Name, header)
		}
		switch in {
		case "":
			in = "body"
		case "path", "query", "header":
			if !scalarKind(f.Type.Kind()) {
				return nil, fmt.Errorf("input field %s: a %s parameter must be a string, number or boolean, not %s", f.Name, in, f.Type)
			}
		default:
			return nil, fmt.Errorf("input field %s: in:%q is not one of path, query, header", f.Name, in)
		}
		p := Param{Name: name, In: in, kind: f.Type.Kind()}
		if in == "header" {
			h, err := headerInput(header)
			if err != nil {
				return nil, fmt.Errorf("input field %s: %w", f.Name, err)
			}
			if other, dup := headers[h]; dup {
				return nil, fmt.Errorf("input fields %s and %s both read header %s; declare it once", other, f.Name, h)
			}
			headers[h], p.Header = f.Name, h
		}
		if in != "body" {
			p.Type = schemaType(p.kind)
		}
		out = append(out, p)
	}
	return out, nil
}

// reservedHeaders are the headers that idem, HTTP or the surfaces own:
// an operation cannot declare them as inputs. Canonical names.
var reservedHeaders = map[string]bool{
	"Accept": true, "Accept-Encoding": true, "Authorization": true, "Baggage": true,
	"Connection": true, "Content-Encoding": true, "Content-Length": true, "Content-Type": true,
	"Cookie": true, "Expect": true, "Forwarded": true, "Host": true, HeaderIdempotencyKey: true,
	"Keep-Alive": true, "Mcp-Protocol-Version": true, "Mcp-Session-Id": true, "Origin": true,
	"Prefer": true, "Proxy-Authorization": true, "Te": true, "Traceparent": true, "Tracestate": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// ReservedHeader reports whether name (in any case) is a header that
// idem, HTTP or the surfaces own, which an operation cannot declare as an
// input: Idempotency-Key, Prefer, Authorization, Cookie, Content-Type,
// Content-Length, Host, traceparent, tracestate, baggage, the MCP session
// headers, the hop-by-hop headers, and every Idem-* header.
func ReservedHeader(name string) bool {
	c := textproto.CanonicalMIMEHeaderKey(name)
	return reservedHeaders[c] || strings.HasPrefix(c, "Idem-")
}

// headerInput checks the header:"Name" of an in:"header" field and
// returns its canonical form.
func headerInput(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf(`in:"header" needs the header's name beside it, e.g. header:"X-Tenant"`)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '-' || c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' || c == '+' ||
			c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')) {
			return "", fmt.Errorf("header:%q is not a header name (RFC 9110 token: letters, digits and !#$%%&'*+-.^_`|~)", name)
		}
	}
	if ReservedHeader(name) {
		return "", fmt.Errorf("header %s is reserved: idem or HTTP owns it, so it cannot be an input; use another header", textproto.CanonicalMIMEHeaderKey(name))
	}
	return textproto.CanonicalMIMEHeaderKey(name), nil
}

// Kind is the Go kind of a path, query or header argument's value, which
// its string is read as.
func (p Param) Kind() reflect.Kind { return p.kind }

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

// Metadata returns the operation's metadata, defaults filled in.
func (c *Compiled) Metadata() Metadata { return c.meta }

// Params returns the flat arguments (read-only).
func (c *Compiled) Params() []Param { return c.params }

// Policies returns the operation's own policies (read-only).
func (c *Compiled) Policies() []Policy { return c.policies }

// Raw returns the spec of a raw operation (DefineRaw), nil for a typed one.
func (c *Compiled) Raw() *RawSpec { return c.raw }

// ValidateInput validates the flat argument object against the input
// schema: nil when it conforms, else at most schema.MaxErrors errors and
// how many there were in all.
func (c *Compiled) ValidateInput(args []byte) ([]schema.FieldError, int) {
	return c.input.ValidateCounted(args)
}

// RequiresInput reports whether the input schema requires the argument.
func (c *Compiled) RequiresInput(name string) bool { return c.input.Requires(name) }

// ValidateOutput validates an encoded output against the output schema.
func (c *Compiled) ValidateOutput(out []byte) []schema.FieldError { return c.output.Validate(out) }

// Decode decodes the validated flat argument object into the operation's
// input type (a raw operation's input is built by the engine).
func (c *Compiled) Decode(args []byte) (any, error) { return c.decode(args) }

// Invoke runs the handler once.
func (c *Compiled) Invoke(ctx context.Context, call *Call, in any) (any, error) {
	return c.invoke(ctx, call, in)
}

// HasPreview reports whether the operation has a preview handler.
func (c *Compiled) HasPreview() bool { return c.preview != nil }

// Preview runs the preview handler once (HasPreview).
func (c *Compiled) Preview(ctx context.Context, call *Call, in any) (any, error) {
	return c.preview(ctx, call, in)
}

// Descriptor returns what the surfaces publish of the operation.
func (c *Compiled) Descriptor() Descriptor { return c.descriptor() }
