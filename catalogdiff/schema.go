package catalogdiff

import (
	"fmt"
	"slices"
)

// maxSchemaDepth bounds the schema comparison: below it, a difference is
// reported once, as not classified.
const maxSchemaDepth = 16

// notClassified is the reason of a schema change this package does not
// understand; it is a widening, to be reviewed by a person.
const notClassified = "schema changed in a way not classified; review"

// schemaCtx is where a comparison stands in an input or output schema.
type schemaCtx struct {
	path  string // "inputSchema.properties.color"
	label string // "input color", "the answer"
	input bool   // inputSchema (the caller sends it), else outputSchema (the caller reads it)
}

func (c schemaCtx) at(key string) string { return c.path + "." + key }

// property is the context of a named property.
func (c schemaCtx) property(name string) schemaCtx {
	return schemaCtx{path: c.at("properties." + name), label: c.child(name), input: c.input}
}

func (c schemaCtx) child(name string) string {
	switch c.label {
	case "the input":
		return "input " + name
	case "the answer":
		return "answer field " + name
	}
	return c.label + "." + name
}

// classFor is the class of a change that makes the schema stricter
// (tighter) or more permissive: a stricter input refuses what a caller
// sent, a more permissive output hands a caller what it did not handle.
func (c schemaCtx) classFor(tighter bool) Class {
	if tighter == c.input {
		return Widening
	}
	return Narrowing
}

// annotations change no validation: neutral.
var annotations = []string{"description", "title", "examples", "$comment", "$schema", "deprecated", "readOnly", "writeOnly"}

var lowerBounds = []string{"minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties"}
var upperBounds = []string{"maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties"}

// schema compares two JSON Schemas keyword by keyword.
func (d *differ) schema(c schemaCtx, o, n any, depth int) {
	if equal(o, n) {
		return
	}
	om, okO := o.(map[string]any)
	nm, okN := n.(map[string]any)
	if !okO || !okN || depth >= maxSchemaDepth {
		d.change(c.path, Widening, o, n, notClassified)
		return
	}
	for _, k := range unionKeys(om, nm) {
		ov, nv := om[k], nm[k]
		if equal(ov, nv) {
			continue
		}
		path := c.at(k)
		switch {
		case k == "properties":
			d.properties(c, asObject(ov), asObject(nv), nm, depth)
		case k == "required":
			if !isStrings(ov) || !isStrings(nv) {
				d.change(path, Widening, ov, nv, notClassified)
				continue
			}
			d.required(c, ov, nv)
		case k == "type":
			d.schemaType(c, ov, nv)
		case k == "enum":
			d.enum(c, ov, nv)
		case k == "additionalProperties":
			d.additionalProperties(c, ov, nv, depth)
		case k == "items":
			if ov == nil {
				ov = map[string]any{}
			}
			if nv == nil {
				nv = map[string]any{}
			}
			d.schema(schemaCtx{path: path, label: c.label + "[]", input: c.input}, ov, nv, depth+1)
		case contains(lowerBounds, k), contains(upperBounds, k):
			d.bound(c, k, ov, nv)
		case k == "pattern", k == "format", k == "const":
			d.constraint(c, k, ov, nv)
		case k == "uniqueItems":
			if equal(orFalse(ov), orFalse(nv)) {
				continue
			}
			tighter := nv == true
			d.change(path, c.classFor(tighter), ov, nv, boundReason(c, tighter, fmt.Sprintf("uniqueItems is now %s", display(orFalse(nv)))))
		case k == "default":
			if c.input {
				d.change(path, Widening, ov, nv,
					fmt.Sprintf("%s: leaving it out now means %s (was %s): send it explicitly to keep the old meaning", c.label, displayOr(nv, "no default"), displayOr(ov, "no default")))
			} else {
				d.change(path, Neutral, ov, nv, "a default in an answer's schema changes nothing a caller reads")
			}
		case k == "x-idem-in":
			d.change(path, Widening, ov, nv,
				fmt.Sprintf("%s now goes in the %s (was the %s): a caller that builds requests by hand must move it", c.label, displayOr(nv, "body"), displayOr(ov, "body")))
		case contains(annotations, k):
			d.change(path, Neutral, ov, nv, "documentation: nothing a caller sends or reads changes")
		default:
			d.change(path, Widening, ov, nv, notClassified)
		}
	}
}

func (d *differ) properties(c schemaCtx, o, n, newSchema map[string]any, depth int) {
	for _, name := range unionKeys(o, n) {
		p := c.property(name)
		ov, inOld := o[name]
		nv, inNew := n[name]
		switch {
		case !inNew && c.input && newSchema["additionalProperties"] == false:
			d.change(p.path, Widening, ov, nil, fmt.Sprintf("%s was removed: a call that sends it is now refused (400); stop sending it", p.label))
		case !inNew && c.input:
			d.change(p.path, Widening, ov, nil, fmt.Sprintf("%s was removed: it is now ignored; stop relying on it", p.label))
		case !inNew:
			d.change(p.path, Widening, ov, nil, fmt.Sprintf("%s was removed: the answer no longer carries it; stop reading it", p.label))
		case !inOld && c.input:
			d.change(p.path, Narrowing, nil, nv, fmt.Sprintf("%s is new; a caller need not send it unless it is also required", p.label))
		case !inOld:
			d.change(p.path, Narrowing, nil, nv, fmt.Sprintf("%s is new; a caller may ignore it", p.label))
		default:
			d.schema(p, ov, nv, depth+1)
		}
	}
}

func (d *differ) required(c schemaCtx, o, n any) {
	removed, added := setDiff(o, n)
	path := c.at("required")
	for _, v := range added {
		label := c.child(display(v))
		if c.input {
			d.change(path, Widening, nil, v, fmt.Sprintf("%s is now required: send it in every call", label))
		} else {
			d.change(path, Narrowing, nil, v, fmt.Sprintf("%s is now always present", label))
		}
	}
	for _, v := range removed {
		label := c.child(display(v))
		if c.input {
			d.change(path, Narrowing, v, nil, fmt.Sprintf("%s is no longer required; sending it still works", label))
		} else {
			d.change(path, Widening, v, nil, fmt.Sprintf("%s may now be absent: handle its absence", label))
		}
	}
}

// types reads a type keyword: nil for absent (any type).
func types(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			out = append(out, str(e))
		}
		return out
	}
	return nil
}

// typesWithin reports whether every type of a is allowed by b (nil: any
// type); integer is within number.
func typesWithin(a, b []string) bool {
	if b == nil {
		return true
	}
	if a == nil {
		return false
	}
	for _, t := range a {
		if !slices.Contains(b, t) && !(t == "integer" && slices.Contains(b, "number")) {
			return false
		}
	}
	return true
}

func (d *differ) schemaType(c schemaCtx, o, n any) {
	path := c.at("type")
	if (o != nil && !isTypeValue(o)) || (n != nil && !isTypeValue(n)) {
		d.change(path, Widening, o, n, notClassified)
		return
	}
	ot, nt := types(o), types(n)
	newWithin, oldWithin := typesWithin(nt, ot), typesWithin(ot, nt)
	switch {
	case newWithin && oldWithin:
		d.change(path, Neutral, o, n, "the same types, written differently")
	case newWithin: // stricter
		if c.input {
			d.change(path, Widening, o, n, fmt.Sprintf("%s now accepts only %s (was %s): a value of another type is refused (400)", c.label, displayOr(n, "any type"), displayOr(o, "any type")))
		} else {
			d.change(path, Narrowing, o, n, fmt.Sprintf("%s is now only %s (was %s)", c.label, displayOr(n, "any type"), displayOr(o, "any type")))
		}
	case oldWithin: // more permissive
		if c.input {
			d.change(path, Narrowing, o, n, fmt.Sprintf("%s now also accepts %s (was %s)", c.label, displayOr(n, "any type"), displayOr(o, "any type")))
		} else {
			d.change(path, Widening, o, n, fmt.Sprintf("%s may now be %s (was %s): handle the new type", c.label, displayOr(n, "any type"), displayOr(o, "any type")))
		}
	default:
		if c.input {
			d.change(path, Widening, o, n, fmt.Sprintf("%s changed type from %s to %s: a value of the old type is refused (400)", c.label, display(o), display(n)))
		} else {
			d.change(path, Widening, o, n, fmt.Sprintf("%s changed type from %s to %s: read the new type", c.label, display(o), display(n)))
		}
	}
}

// isStrings reports whether v is absent or an array of strings.
func isStrings(v any) bool {
	if v == nil {
		return true
	}
	list, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range list {
		if _, ok := e.(string); !ok {
			return false
		}
	}
	return true
}

func isTypeValue(v any) bool {
	switch t := v.(type) {
	case string:
		return true
	case []any:
		for _, e := range t {
			if _, ok := e.(string); !ok {
				return false
			}
		}
		return true
	}
	return false
}

func (d *differ) enum(c schemaCtx, o, n any) {
	path := c.at("enum")
	_, listO := o.([]any)
	_, listN := n.([]any)
	switch {
	case (o != nil && !listO) || (n != nil && !listN):
		d.change(path, Widening, o, n, notClassified)
	case o == nil:
		if c.input {
			d.change(path, Widening, o, n, fmt.Sprintf("%s now accepts only %s: another value is refused (400)", c.label, display(n)))
		} else {
			d.change(path, Narrowing, o, n, fmt.Sprintf("%s is now one of %s", c.label, display(n)))
		}
	case n == nil:
		if c.input {
			d.change(path, Narrowing, o, n, fmt.Sprintf("%s is no longer limited to %s", c.label, display(o)))
		} else {
			d.change(path, Widening, o, n, fmt.Sprintf("%s is no longer limited to %s: handle any value", c.label, display(o)))
		}
	default:
		removed, added := setDiff(o, n)
		for _, v := range removed {
			if c.input {
				d.change(path, Widening, v, nil, fmt.Sprintf("%s no longer accepts %s: a call that sends it is refused (400)", c.label, display(v)))
			} else {
				d.change(path, Narrowing, v, nil, fmt.Sprintf("%s is no longer %s", c.label, display(v)))
			}
		}
		for _, v := range added {
			if c.input {
				d.change(path, Narrowing, nil, v, fmt.Sprintf("%s now also accepts %s", c.label, display(v)))
			} else {
				d.change(path, Widening, nil, v, fmt.Sprintf("%s may now be %s: handle the value", c.label, display(v)))
			}
		}
	}
}

// additionalProperties: absent is true; a schema is stricter than true and
// more permissive than false; two schemas are compared as schemas.
func (d *differ) additionalProperties(c schemaCtx, o, n any, depth int) {
	path := c.at("additionalProperties")
	if o == nil {
		o = true
	}
	if n == nil {
		n = true
	}
	if equal(o, n) {
		return
	}
	strictness := func(v any) (int, bool) {
		switch v {
		case true:
			return 0, true
		case false:
			return 2, true
		}
		if _, ok := v.(map[string]any); ok {
			return 1, true
		}
		return 0, false
	}
	os, okO := strictness(o)
	ns, okN := strictness(n)
	switch {
	case !okO || !okN:
		d.change(path, Widening, o, n, notClassified)
	case os == 1 && ns == 1:
		d.schema(schemaCtx{path: path, label: c.label + "'s other properties", input: c.input}, o, n, depth+1)
	default:
		tighter := ns > os
		var what string
		switch {
		case c.input && tighter:
			what = fmt.Sprintf("%s now refuses properties it does not list (400): send only the listed ones", c.label)
		case c.input:
			what = fmt.Sprintf("%s now accepts properties it does not list", c.label)
		case tighter:
			what = fmt.Sprintf("%s now carries only the properties it lists", c.label)
		default:
			what = fmt.Sprintf("%s may now carry properties it does not list: ignore or handle them", c.label)
		}
		d.change(path, c.classFor(tighter), o, n, what)
	}
}

// bound compares a numeric lower or upper bound; absent is unbounded.
func (d *differ) bound(c schemaCtx, k string, o, n any) {
	path := c.at(k)
	of, okO := num(o)
	nf, okN := num(n)
	if (o != nil && !okO) || (n != nil && !okN) {
		d.change(path, Widening, o, n, notClassified)
		return
	}
	lower := contains(lowerBounds, k)
	var tighter bool
	switch {
	case o == nil:
		tighter = true
	case n == nil:
		tighter = false
	case lower:
		tighter = nf > of
	default:
		tighter = nf < of
	}
	what := fmt.Sprintf("%s is now %s (was %s)", k, displayOr(n, "unbounded"), displayOr(o, "unbounded"))
	d.change(path, c.classFor(tighter), o, n, boundReason(c, tighter, what))
}

// constraint compares pattern, format and const: adding one is stricter,
// removing one more permissive, changing one is not classified.
func (d *differ) constraint(c schemaCtx, k string, o, n any) {
	path := c.at(k)
	switch {
	case o == nil:
		d.change(path, c.classFor(true), o, n, boundReason(c, true, fmt.Sprintf("%s %s now applies", k, display(n))))
	case n == nil:
		d.change(path, c.classFor(false), o, n, boundReason(c, false, fmt.Sprintf("%s %s no longer applies", k, display(o))))
	default:
		d.change(path, Widening, o, n, fmt.Sprintf("%s: %s changed from %s to %s: %s", c.label, k, display(o), display(n), notClassified))
	}
}

// boundReason is the reason of a stricter or more permissive constraint.
func boundReason(c schemaCtx, tighter bool, what string) string {
	switch {
	case c.input && tighter:
		return fmt.Sprintf("%s: %s: a value the old schema accepted may now be refused (400); check what the caller sends", c.label, what)
	case c.input:
		return fmt.Sprintf("%s: %s; what a caller sent before is still accepted", c.label, what)
	case tighter:
		return fmt.Sprintf("%s: %s; what a caller handled before still covers it", c.label, what)
	default:
		return fmt.Sprintf("%s: %s: the answer may now hold values the old schema excluded; handle them", c.label, what)
	}
}

func orFalse(v any) any {
	if v == nil {
		return false
	}
	return v
}

func displayOr(v any, absent string) string {
	if v == nil {
		return absent
	}
	return display(v)
}
