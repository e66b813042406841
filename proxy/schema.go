package proxy

import (
	"strings"
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

// toJSONSchema converts one schema (generic JSON) to JSON Schema 2020-12.
func toJSONSchema(v any, openapi30 bool) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v // true, false
	}
	out := make(map[string]any, len(s))
	for k, val := range s {
		switch {
		case k == "$ref":
			if ref, ok := val.(string); ok && strings.HasPrefix(ref, componentRef) {
				val = "#/$defs/" + strings.TrimPrefix(ref, componentRef)
			}
		case schemaValued[k]:
			val = toJSONSchema(val, openapi30)
		case schemaMaps[k]:
			if m, ok := val.(map[string]any); ok {
				conv := make(map[string]any, len(m))
				for name, sub := range m {
					conv[name] = toJSONSchema(sub, openapi30)
				}
				val = conv
			}
		case schemaLists[k]:
			if l, ok := val.([]any); ok {
				conv := make([]any, len(l))
				for i, sub := range l {
					conv[i] = toJSONSchema(sub, openapi30)
				}
				val = conv
			}
		case openapi30 && dropped30[k]:
			continue
		}
		out[k] = val
	}
	if !openapi30 {
		return out
	}
	if s["nullable"] == true {
		switch t := out["type"].(type) {
		case string:
			out["type"] = []any{t, "null"}
		case nil:
		default:
		}
		if enum, ok := out["enum"].([]any); ok {
			out["enum"] = append(enum, nil)
		}
	}
	for _, bound := range []struct{ flag, value string }{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
		switch flag := out[bound.flag].(type) {
		case bool:
			delete(out, bound.flag)
			if n, ok := out[bound.value]; ok && flag {
				out[bound.flag] = n
				delete(out, bound.value)
			}
		}
	}
	return out
}
