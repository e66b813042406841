package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
)

// decodeInput builds the flat argument object from the path, the query and
// the body (SPEC §5 stage 4), validates it against the input schema and
// decodes it into the operation's input type. It returns the validated
// JSON too, for policies and approvals.
func (x *execution) decodeInput() (json.RawMessage, any, *Error) {
	args := map[string]json.RawMessage{}
	var problems []map[string]string
	bad := func(path, format string, a ...any) {
		problems = append(problems, map[string]string{"path": path, "message": fmt.Sprintf(format, a...)})
	}
	if body := bytes.TrimSpace(x.req.Body); len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&args); err != nil || dec.More() {
			bad("", "the body must be one JSON object")
		}
	}
	for _, p := range x.op.params {
		if p.In == "body" {
			continue
		}
		if _, clash := args[p.Name]; clash {
			bad("/"+p.Name, "%s comes from the %s, not the body; remove it from the body", p.Name, p.In)
			continue
		}
		var value string
		var present bool
		if p.In == "path" {
			value, present = x.req.PathParams[p.Name]
		} else if vs, ok := x.req.Query[p.Name]; ok && len(vs) > 0 {
			if len(vs) > 1 {
				bad("/"+p.Name, "query parameter %s is given %d times; give it once", p.Name, len(vs))
				continue
			}
			value, present = vs[0], true
		}
		if !present {
			continue // the schema reports it if it is required
		}
		v, err := scalarJSON(p.kind, value)
		if err != nil {
			bad("/"+p.Name, "%s parameter %s: %v", p.In, p.Name, err)
			continue
		}
		args[p.Name] = v
	}
	// A query parameter the operation does not declare is refused like an
	// unknown body field, not silently ignored (it is part of the
	// fingerprint; the control parameter dryRun is no longer in the query).
	// At most maxUnknownQuery are listed.
	const maxUnknownQuery = 10
	unknown := 0
	for _, name := range slices.Sorted(maps.Keys(x.req.Query)) {
		if slices.ContainsFunc(x.op.params, func(p Param) bool { return p.In == "query" && p.Name == name }) {
			continue
		}
		if unknown++; unknown <= maxUnknownQuery {
			bad("/"+name, "query parameter %q is not a parameter of %s", name, x.op.meta.Name)
		}
	}
	if unknown > maxUnknownQuery {
		bad("", "%d more unknown query parameters", unknown-maxUnknownQuery)
	}
	if len(problems) > 0 {
		return nil, nil, invalidInput(problems)
	}
	raw, _ := json.Marshal(args)
	if errs := x.op.input.Validate(raw); len(errs) > 0 {
		for _, e := range errs {
			bad(e.Path, "%s", e.Message)
		}
		return nil, nil, invalidInput(problems)
	}
	in, err := x.op.decode(raw)
	if err != nil {
		bad("", "%v", err)
		return nil, nil, invalidInput(problems)
	}
	return raw, in, nil
}

func invalidInput(problems []map[string]string) *Error {
	msg := problems[0]["message"]
	if p := problems[0]["path"]; p != "" {
		msg = p + ": " + msg
	}
	if len(problems) > 1 {
		msg += fmt.Sprintf(" (and %d more in details.errors)", len(problems)-1)
	}
	return Errorf(CodeInvalidInput, "invalid input: %s", msg).WithDetail("errors", problems)
}

// scalarJSON converts a path or query string to the JSON value of its
// field's kind.
func scalarJSON(kind reflect.Kind, s string) (json.RawMessage, error) {
	switch kind {
	case reflect.String:
		return jsonValue(s), nil
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("want true or false, got %q", s)
		}
		return jsonValue(b), nil
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("want a number, got %q", s)
		}
		return jsonValue(f), nil
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want an integer, got %q", s)
		}
		return jsonValue(n), nil
	}
}
