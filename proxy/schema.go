package proxy

import (
	"fmt"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// The input schema of a proxied operation is JSON Schema 2020-12, the
// dialect idem validates and publishes, with the document's component
// schemas under $defs. OpenAPI 3.1 schemas are that dialect already;
// OpenAPI 3.0 schemas are converted: nullable: true becomes a "null" type,
// boolean exclusiveMinimum/exclusiveMaximum become numbers, and the
// keywords 3.0 has but 2020-12 does not are dropped.

// componentRef is the prefix of a reference to a component schema.
const componentRef = "#/components/schemas/"

// Keywords whose value is a schema, a map of schemas or a list of them.
var (
	schemaValued = map[string]bool{"items": true, "additionalProperties": true, "not": true, "contains": true,
		"propertyNames": true, "if": true, "then": true, "else": true, "unevaluatedItems": true,
		"unevaluatedProperties": true, "additionalItems": true, "contentSchema": true}
	schemaMaps  = map[string]bool{"properties": true, "patternProperties": true, "$defs": true, "definitions": true, "dependentSchemas": true}
	schemaLists = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true}
	// dropped30 are OpenAPI 3.0 keywords without a JSON Schema meaning.
	dropped30 = map[string]bool{"nullable": true, "discriminator": true, "xml": true, "externalDocs": true, "example": true}
)

// MaxEnum is the most values an enum idem checks may have. A longer
// enum (a country, currency or time-zone list has a few hundred values)
// is left out of the schemas idem validates and publishes (the catalog,
// the MCP tools): checking a value against it, and holding it once per
// operation that reaches it, would cost in proportion to the list on
// every call and at start. The upstream, whose document it is, still
// checks it, and the start-up log names each one (docs/proxy.md).
const MaxEnum = 1000

// droppedEnum is an enum longer than MaxEnum, left out of a schema: at is
// its JSON Pointer in the operation's input or answer schema.
type droppedEnum struct {
	at     string
	values int
}

// converter turns a document's schemas into JSON Schema 2020-12, for
// requests (readOnly properties are not required of a request) or for
// answers (nor writeOnly ones of an answer).
type converter struct {
	openapi30, request bool
	// components are the document's component schemas as generic JSON.
	components map[string]any
	// converted are the components converted so far, by name: each is
	// converted once and shared by every operation that reaches it.
	converted map[string]converted
	// dropped collects the enums left out of the schemas converted since
	// the last take: the operation being declared.
	dropped []droppedEnum
}

// converted is a converted component and the enums left out of it.
type converted struct {
	schema  any
	dropped []droppedEnum
}

// componentsOf reads doc's component schemas as generic JSON.
func componentsOf(doc *Document) (map[string]any, error) {
	out := map[string]any{}
	if doc.Components == nil {
		return out, nil
	}
	for name, ref := range doc.Components.Schemas {
		if ref.Ref != "" && !strings.HasPrefix(ref.Ref, componentRef) {
			return nil, fmt.Errorf("components.schemas.%s: schema reference %q: only references to #/components/schemas/… are supported", name, ref.Ref)
		}
		v, err := jsonOf(ref)
		if err != nil {
			return nil, fmt.Errorf("components.schemas.%s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// newConverter converts doc's schemas, whose components componentsOf read.
func newConverter(doc *Document, components map[string]any, request bool) *converter {
	return &converter{openapi30: doc.IsOpenAPI30(), request: request, components: components, converted: map[string]converted{}}
}

// take returns the enums dropped since the last take, and forgets them.
func (c *converter) take() []droppedEnum {
	d := c.dropped
	c.dropped = nil
	return d
}

// of converts one schema of the document, at (a JSON Pointer) in the
// operation's schema.
func (c *converter) of(ref *openapi3.SchemaRef, at string) (any, error) {
	if ref.Ref != "" && !strings.HasPrefix(ref.Ref, componentRef) {
		return nil, fmt.Errorf("schema reference %q: only references to #/components/schemas/… are supported", ref.Ref)
	}
	v, err := jsonOf(ref)
	if err != nil {
		return nil, err
	}
	return c.convert(v, at), nil
}

// defsFor returns the converted components that root refers to, directly
// or through other components: what its $defs must hold, and no more.
func (c *converter) defsFor(root any) map[string]any {
	defs := map[string]any{}
	queue := refsIn(root, nil)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, done := defs[name]; done {
			continue
		}
		conv, ok := c.converted[name]
		if !ok {
			raw, ok := c.components[name]
			if !ok {
				continue // the validator reports the dangling reference
			}
			outer := c.dropped
			c.dropped = nil
			conv.schema = c.convert(raw, "/$defs/"+pointerToken(name))
			conv.dropped, c.dropped = c.dropped, outer
			c.converted[name] = conv
		}
		c.dropped = append(c.dropped, conv.dropped...)
		defs[name] = conv.schema
		queue = refsIn(conv.schema, queue)
	}
	return defs
}

// pointerToken escapes a JSON Pointer reference token (RFC 6901).
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// refsIn appends the component names v's $refs name.
func refsIn(v any, out []string) []string {
	switch t := v.(type) {
	case map[string]any:
		for k, sub := range t {
			if ref, ok := sub.(string); ok && k == "$ref" && strings.HasPrefix(ref, "#/$defs/") {
				out = append(out, strings.TrimPrefix(ref, "#/$defs/"))
				continue
			}
			out = refsIn(sub, out)
		}
	case []any:
		for _, sub := range t {
			out = refsIn(sub, out)
		}
	}
	return out
}

// convert converts one schema (generic JSON), at (a JSON Pointer) in the
// operation's schema, to JSON Schema 2020-12, leaving out the enums
// longer than MaxEnum (which it adds to c.dropped).
func (c *converter) convert(v any, at string) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v // true, false
	}
	openapi30 := c.openapi30
	out := make(map[string]any, len(s))
	for k, val := range s {
		switch {
		case k == "$ref":
			if ref, ok := val.(string); ok && strings.HasPrefix(ref, componentRef) {
				val = "#/$defs/" + strings.TrimPrefix(ref, componentRef)
			}
		case k == "enum":
			if l, ok := val.([]any); ok && len(l) > MaxEnum {
				c.dropped = append(c.dropped, droppedEnum{at: at + "/enum", values: len(l)})
				continue
			}
		case schemaValued[k]:
			val = c.convert(val, at+"/"+k)
		case schemaMaps[k]:
			if m, ok := val.(map[string]any); ok {
				conv := make(map[string]any, len(m))
				for name, sub := range m {
					conv[name] = c.convert(sub, at+"/"+k+"/"+pointerToken(name))
				}
				val = conv
			}
		case schemaLists[k]:
			if l, ok := val.([]any); ok {
				conv := make([]any, len(l))
				for i, sub := range l {
					conv[i] = c.convert(sub, fmt.Sprintf("%s/%s/%d", at, k, i))
				}
				val = conv
			}
		case openapi30 && dropped30[k]:
			continue
		}
		out[k] = val
	}
	c.dropOneWayRequired(out)
	if !openapi30 {
		return out
	}
	for _, bound := range []struct{ flag, value string }{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
		if flag, ok := out[bound.flag].(bool); ok {
			delete(out, bound.flag)
			if n, ok := out[bound.value]; ok && flag {
				out[bound.flag] = n
				delete(out, bound.value)
			}
		}
	}
	if s["nullable"] == true {
		switch t := out["type"].(type) {
		case string:
			out["type"] = []any{t, "null"}
			if enum, ok := out["enum"].([]any); ok {
				out["enum"] = append(enum, nil)
			}
		case nil:
			// No type to widen (nullable beside allOf: [$ref], the usual
			// nullable reference): null, or the schema.
			return map[string]any{"anyOf": []any{map[string]any{"type": "null"}, out}}
		}
	}
	return out
}

// dropOneWayRequired removes from s's required the properties that do
// not travel this way: readOnly ones in a request, writeOnly ones in an
// answer (OpenAPI: they "MUST NOT be sent" that way, so required does not
// apply).
func (c *converter) dropOneWayRequired(s map[string]any) {
	req, ok := s["required"].([]any)
	props, _ := s["properties"].(map[string]any)
	if !ok || props == nil {
		return
	}
	oneWay := "writeOnly"
	if c.request {
		oneWay = "readOnly"
	}
	kept := req[:0:0]
	for _, name := range req {
		if p, _ := props[fmt.Sprint(name)].(map[string]any); p == nil || p[oneWay] != true {
			kept = append(kept, name)
		}
	}
	if len(kept) == 0 {
		delete(s, "required")
		return
	}
	s["required"] = kept
}
