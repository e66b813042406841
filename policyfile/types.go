package policyfile

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// shape is the CEL type of a value read from JSON, and how to convert the
// decoded JSON to it: an object with declared properties is a CEL object
// type (an undeclared field is a type error), a typed scalar its CEL type,
// anything else dyn.
type shape struct {
	typ    *cel.Type
	kind   string // "object", "map", "list", "int", "double", "string", "bool", "dyn"
	name   string // the object type's name
	fields map[string]*shape
	items  *shape
}

var dynShape = &shape{typ: cel.DynType, kind: "dyn"}

// maxShapeDepth bounds the nesting of schemas turned into types (deeper
// values are dyn), and with it the work a hostile schema can cause.
const maxShapeDepth = 16

// schemaShapes builds the shapes of one operation's input schema under
// the type name prefix; objects are registered in objects.
type schemaShapes struct {
	root    map[string]any
	objects map[string]*shape
	refs    int
}

func shapeOf(schema json.RawMessage, name string, objects map[string]*shape) *shape {
	var root map[string]any
	if len(schema) == 0 || json.Unmarshal(schema, &root) != nil {
		return &shape{typ: cel.MapType(cel.StringType, cel.DynType), kind: "map"}
	}
	b := &schemaShapes{root: root, objects: objects}
	s := b.shape(root, name, 0)
	if s.kind != "object" {
		// args is always a map of the arguments.
		return &shape{typ: cel.MapType(cel.StringType, cel.DynType), kind: "map"}
	}
	return s
}

func (b *schemaShapes) shape(s map[string]any, name string, depth int) *shape {
	if depth > maxShapeDepth {
		return dynShape
	}
	if ref, ok := s["$ref"].(string); ok {
		b.refs++
		if b.refs > 1000 {
			return dynShape
		}
		target := b.resolve(ref)
		if target == nil {
			return dynShape
		}
		return b.shape(target, name, depth+1)
	}
	t, _ := s["type"].(string)
	switch t {
	case "integer":
		return &shape{typ: cel.IntType, kind: "int"}
	case "number":
		return &shape{typ: cel.DoubleType, kind: "double"}
	case "string":
		return &shape{typ: cel.StringType, kind: "string"}
	case "boolean":
		return &shape{typ: cel.BoolType, kind: "bool"}
	case "array":
		items := dynShape
		if it, ok := s["items"].(map[string]any); ok {
			items = b.shape(it, name+".item", depth+1)
		}
		return &shape{typ: cel.ListType(items.typ), kind: "list", items: items}
	case "object":
		props, ok := s["properties"].(map[string]any)
		if !ok || len(props) == 0 {
			return &shape{typ: cel.MapType(cel.StringType, cel.DynType), kind: "map"}
		}
		o := &shape{typ: cel.ObjectType(name), kind: "object", name: name, fields: map[string]*shape{}}
		for field, ps := range props {
			fs, ok := ps.(map[string]any)
			if !ok {
				o.fields[field] = dynShape
				continue
			}
			o.fields[field] = b.shape(fs, name+"."+typeSegment(field), depth+1)
		}
		b.objects[name] = o
		return o
	}
	return dynShape
}

// resolve finds a local reference ("#/$defs/X", "#/components/schemas/X").
func (b *schemaShapes) resolve(ref string) map[string]any {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	var cur any = b.root
	for _, seg := range strings.Split(p, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")]
	}
	m, _ := cur.(map[string]any)
	return m
}

// typeSegment makes a field name usable in a type name.
func typeSegment(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteString("_" + strconv.Itoa(int(r)) + "_")
		}
	}
	return b.String()
}

// maxExact is the largest integer a float64 holds exactly (2^53).
const maxExact = 1 << 53

// value converts decoded JSON to the Go value CEL reads for s: a number is
// an int where s says integer, a double where it says number, and where
// it says nothing an int when it is integral (so that args.n == 5 holds
// for 5, 5.0 and 5e0), else a double.
func (s *shape) value(v any) any {
	switch x := v.(type) {
	case float64:
		integral := x == math.Trunc(x) && math.Abs(x) <= maxExact
		if s.kind == "double" || !integral {
			return x
		}
		return int64(x)
	case []any:
		items := s.items
		if items == nil {
			items = dynShape
		}
		for i := range x {
			x[i] = items.value(x[i])
		}
		return x
	case map[string]any:
		for k, fv := range x {
			fs := dynShape
			if s.fields != nil && s.fields[k] != nil {
				fs = s.fields[k]
			}
			x[k] = fs.value(fv)
		}
		return x
	}
	return v
}

// provider adds the object types of schemas (and of principal and
// operation) to CEL's registry. A field of an object reads its key of
// the map the JSON decoded to; an absent field is an error, as CEL's
// own missing map key, unless tested with has().
type provider struct {
	*types.Registry
	objects map[string]*shape
}

func (p *provider) FindStructType(name string) (*types.Type, bool) {
	if _, ok := p.objects[name]; ok {
		return types.NewTypeTypeWithParam(types.NewObjectType(name)), true
	}
	return p.Registry.FindStructType(name)
}

func (p *provider) FindStructFieldNames(name string) ([]string, bool) {
	o, ok := p.objects[name]
	if !ok {
		return p.Registry.FindStructFieldNames(name)
	}
	names := make([]string, 0, len(o.fields))
	for n := range o.fields {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, true
}

func (p *provider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	o, ok := p.objects[name]
	if !ok {
		return p.Registry.FindStructFieldType(name, field)
	}
	fs, ok := o.fields[field]
	if !ok {
		return nil, false
	}
	return &types.FieldType{
		Type: fs.typ,
		IsSet: func(target any) bool {
			m, ok := target.(map[string]any)
			if !ok {
				return false
			}
			_, ok = m[field]
			return ok
		},
		GetFrom: func(target any) (any, error) {
			m, ok := target.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s is not an object", name)
			}
			v, ok := m[field]
			if !ok {
				return nil, fmt.Errorf("no such key: %s", field)
			}
			return v, nil
		},
	}, true
}

func (p *provider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	if _, ok := p.objects[name]; ok {
		return types.NewErr("cannot construct %s", name)
	}
	return p.Registry.NewValue(name, fields)
}

// principalShape and operationShape are the fixed types of principal and
// operation.
var (
	principalShape = &shape{typ: cel.ObjectType("idem.Principal"), kind: "object", name: "idem.Principal", fields: map[string]*shape{
		"org": {typ: cel.StringType, kind: "string"}, "id": {typ: cel.StringType, kind: "string"},
		"kind": {typ: cel.StringType, kind: "string"}, "roles": {typ: cel.ListType(cel.StringType), kind: "list"},
	}}
	operationShape = &shape{typ: cel.ObjectType("idem.Operation"), kind: "object", name: "idem.Operation", fields: map[string]*shape{
		"name": {typ: cel.StringType, kind: "string"}, "sideEffect": {typ: cel.StringType, kind: "string"},
		"retryKind": {typ: cel.StringType, kind: "string"}, "upstream": {typ: cel.StringType, kind: "string"},
	}}
)
