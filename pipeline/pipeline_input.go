package pipeline

import (
	"github.com/idem-run/idem"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-run/idem/canonical"
)

// decodeInput builds the flat argument object from the path, the query and
// the body (SPEC §5 stage 4), validates it against the input schema and
// decodes it into the operation's input type. It returns the validated
// JSON too, for policies and approvals.
//
// A raw operation's input is the request itself (RawRequest), checked the
// same way unless it is Unvalidated; a body of another media type than
// JSON is not read.
func (x *execution) decodeInput() (json.RawMessage, any, *idem.Error) {
	if x.op.raw != nil && x.op.raw.Unvalidated {
		for _, name := range sortedKeys(x.inv.Intent.PathParams) {
			if v := x.inv.Intent.PathParams[name]; v == "." || v == ".." {
				return nil, nil, idem.InvalidInput([]map[string]string{{"path": "/" + name, "message": fmt.Sprintf("path parameter %s cannot be %q", name, v)}})
			}
		}
		// Unvalidated, the body still goes upstream byte for byte under its
		// fingerprint: it must hold only values the fingerprint keeps
		// exactly (SPEC §6.2: integers within ±(2^53−1), no NUL), or two
		// different bodies would be one intent.
		if body := bytes.TrimSpace(x.inv.Intent.Body); len(body) > 0 && x.opaque == "" {
			if _, err := x.strictBody(body); err != nil {
				var se *canonical.SyntaxError
				if errors.As(err, &se) && se.Pointer != "" {
					return nil, nil, idem.InvalidInput([]map[string]string{{"path": se.Pointer, "message": se.Reason()}})
				}
				return nil, nil, idem.InvalidInput([]map[string]string{{"path": "", "message": "the body is not acceptable JSON (RFC 8259, I-JSON): " + err.Error()}})
			}
		}
		for _, p := range x.op.params {
			if p.In != "header" {
				continue
			}
			for _, v := range x.inv.Intent.Header.Values(p.Header) {
				if msg := headerValueProblem(p, v); msg != "" {
					return nil, nil, idem.InvalidInput([]map[string]string{{"path": "/" + p.Name, "message": msg}})
				}
			}
		}
		return json.RawMessage(`{}`), x.rawRequest(), nil
	}
	var args map[string]json.RawMessage // made once a member or parameter needs it
	// raw is the argument object as encoding/json writes args (members
	// sorted by name, <, > and & escaped): the body itself when only the
	// body holds arguments and it is written so already (asMarshalled).
	var raw json.RawMessage
	var problems []map[string]string
	bad := func(path, format string, a ...any) {
		problems = append(problems, map[string]string{"path": path, "message": fmt.Sprintf(format, a...)})
	}
	// The body is read in its strict canonical form (SPEC §6.2): what is
	// validated and decoded is what the fingerprint hashes, and every value
	// is one that a store can hold.
	if mt := x.opaque; mt != "" && slices.ContainsFunc(x.op.params, func(p idem.Param) bool { return p.In == "body" }) {
		bad("", "the body is %s, but this operation's body is a JSON object: send it as JSON with Content-Type: application/json", mt)
	}
	if body := bytes.TrimSpace(x.inv.Intent.Body); len(body) > 0 && x.opaque == "" {
		canon, err := x.strictBody(body)
		switch {
		case err != nil:
			var se *canonical.SyntaxError
			switch {
			case errors.As(err, &se) && se.Pointer != "":
				bad(se.Pointer, "%s", se.Reason())
			case se != nil:
				bad("", "the body is not one acceptable JSON object (RFC 8259, I-JSON): %s (at byte %d)", se.Reason(), se.Offset)
			default:
				bad("", "the body must be one JSON object")
			}
		case canon[0] != '{':
			bad("", "the body must be one JSON object")
		case asMarshalled(canon) && !slices.ContainsFunc(x.op.params, func(p idem.Param) bool { return p.In != "body" }):
			raw = canon
		default:
			_ = json.Unmarshal(canon, &args) // canonical JSON: no duplicate names
		}
	}
	for _, p := range x.op.params {
		if p.In == "body" {
			continue
		}
		if _, clash := args[p.Name]; clash {
			where := p.In
			if p.In == "header" {
				where = "header " + p.Header
			}
			bad("/"+p.Name, "%s comes from the %s, not the body; remove it from the body", p.Name, where)
			continue
		}
		var value string
		var present bool
		if p.In == "path" {
			value, present = x.inv.Intent.PathParams[p.Name]
			if x.op.raw != nil && (value == "." || value == "..") {
				// Forwarded, it would be a dot segment: another path.
				bad("/"+p.Name, "path parameter %s cannot be %q", p.Name, value)
				continue
			}
		} else if p.In == "header" {
			switch vs := x.inv.Intent.Header.Values(p.Header); len(vs) {
			case 0:
				if x.op.RequiresInput(p.Name) {
					bad("/"+p.Name, "header %s is required (the argument %s); send it once", p.Header, p.Name)
					continue
				}
			case 1:
				value, present = vs[0], true
				if msg := headerValueProblem(p, value); msg != "" {
					bad("/"+p.Name, "%s", msg)
					continue
				}
			default:
				bad("/"+p.Name, "header %s is given %d times; give it once", p.Header, len(vs))
				continue
			}
		} else if vs, ok := x.inv.Intent.Query[p.Name]; ok && len(vs) > 0 {
			if len(vs) > 1 {
				bad("/"+p.Name, "query parameter %s is given %d times; give it once", p.Name, len(vs))
				continue
			}
			value, present = vs[0], true
		}
		if !present {
			continue // the schema reports it if it is required
		}
		v, err := scalarJSON(p.Kind(), value)
		if err != nil {
			if p.In == "header" {
				bad("/"+p.Name, "header %s: %v", p.Header, err)
			} else {
				bad("/"+p.Name, "%s parameter %s: %v", p.In, p.Name, err)
			}
			continue
		}
		if args == nil {
			args = map[string]json.RawMessage{}
		}
		args[p.Name] = v
	}
	// A query parameter the operation does not declare is refused like an
	// unknown body field, not silently ignored (it is part of the
	// fingerprint; the control parameter dryRun is no longer in the query).
	// At most maxUnknownQuery are listed.
	const maxUnknownQuery = 10
	unknown := 0
	for _, name := range sortedKeys(x.inv.Intent.Query) {
		if slices.ContainsFunc(x.op.params, func(p idem.Param) bool { return p.In == "query" && p.Name == name }) {
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
		return nil, nil, idem.InvalidInput(problems)
	}
	if raw == nil {
		if args == nil {
			args = map[string]json.RawMessage{} // {}, not null
		}
		raw, _ = json.Marshal(args)
	}
	if errs, total := x.op.ValidateInput(raw); len(errs) > 0 {
		for _, e := range errs {
			bad(e.Path, "%s", e.Message)
		}
		return nil, nil, idem.InvalidInputOf(problems, len(problems)+total-len(errs))
	}
	if x.op.raw != nil {
		return raw, x.rawRequest(), nil
	}
	in, err := x.op.Decode(raw)
	if err != nil {
		path, msg := decodeProblem(raw, err)
		bad(path, "%s", msg)
		return nil, nil, idem.InvalidInput(problems)
	}
	return raw, in, nil
}

// sortedKeys returns the names of m in order; nothing is allocated when m
// is empty.
func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}

// asMarshalled reports whether canon, a canonical JSON object, is byte for
// byte what encoding/json writes for the map of its members: nothing in it
// that encoding/json escapes and RFC 8785 does not (<, >, &, U+2028,
// U+2029), and no character from U+E000 on, below which RFC 8785's order
// of member names (UTF-16) is Go's (bytes).
func asMarshalled(canon []byte) bool {
	for i, c := range canon {
		switch {
		case c == '<' || c == '>' || c == '&' || c >= 0xEE:
			return false
		case c == 0xE2 && i+2 < len(canon) && canon[i+1] == 0x80 && canon[i+2]&^1 == 0xA8:
			return false
		}
	}
	return true
}

// strictBody is the strict canonical form of the body trimmed of its
// surrounding space: the one read for the fingerprint (canon) when the
// whole body is acceptable, since only JSON whitespace surrounds it then.
// bytes.TrimSpace also trims \v, \f, U+0085 and U+00A0, which JSON does
// not, so a whole body refused is read again trimmed.
func (x *execution) strictBody(trimmed []byte) ([]byte, error) {
	if x.canonErr == nil {
		return x.canon, nil
	}
	return canonical.TransformStrict(trimmed)
}

// headerValueProblem says why value cannot travel in p's header (issue 33
// item 8): a field value holds no control character but tab (RFC 9110
// §5.5). HTTP cannot carry one in; an argument (MCP, the Go API) can,
// and it is the caller's to fix, not an upstream failure. "" when valid.
func headerValueProblem(p idem.Param, value string) string {
	for _, c := range []byte(value) {
		if c < 0x20 && c != '\t' || c == 0x7f {
			what := fmt.Sprintf("the control character U+%04X", c)
			switch c {
			case '\r':
				what = "a carriage return (CR)"
			case '\n':
				what = "a line feed (LF)"
			case 0:
				what = "a NUL character (U+0000)"
			}
			return fmt.Sprintf("header %s (the argument %s) cannot hold %s: an HTTP field value has no control characters but tab", p.Header, p.Name, what)
		}
	}
	return ""
}

// headerInputs returns the values of the operation's declared header
// inputs as the request carries them, under their canonical names: what
// the fingerprint hashes besides path, query and body (SPEC §6.2). The
// request's other headers are never part of the intent.
func (x *execution) headerInputs() map[string][]string {
	var out map[string][]string
	for _, p := range x.op.params {
		if p.In != "header" {
			continue
		}
		if vs := x.inv.Intent.Header.Values(p.Header); len(vs) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[p.Header] = vs
		}
	}
	return out
}

// decodeProblem words an error of the typed decode, which the schema did not
// foresee (an int8 field given 300), in JSON paths and schema terms: the
// path of the value and what the field takes.
func decodeProblem(raw []byte, err error) (path, message string) {
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	switch {
	case errors.As(err, &te):
		got, isNumber := strings.CutPrefix(te.Value, "number ")
		if !isNumber && got == "bool" {
			got = "boolean"
		}
		return canonical.PointerAt(raw, int(te.Offset)), fmt.Sprintf("must be %s, got %s", schemaWords(te.Type), got)
	case errors.As(err, &pe):
		return "", fmt.Sprintf("%q must be a valid date-time (RFC 3339, e.g. 2006-01-02T15:04:05Z)", pe.Value)
	}
	return "", fmt.Sprintf("a value is not accepted: %v", err)
}

// schemaWords says what values of a Go type are, as a JSON Schema would.
func schemaWords(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch k := t.Kind(); {
	case k >= reflect.Int && k <= reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("an integer from %d to %d", max(-int64(1)<<(bits-1), -canonical.MaxExactInteger), min(int64(1)<<(bits-1)-1, canonical.MaxExactInteger))
	case k >= reflect.Uint && k <= reflect.Uintptr:
		return fmt.Sprintf("an integer from 0 to %d", min(uint64(1)<<t.Bits()-1, canonical.MaxExactInteger))
	case k == reflect.Float32 || k == reflect.Float64:
		return "a number"
	case k == reflect.String:
		return "a string"
	case k == reflect.Bool:
		return "a boolean"
	case k == reflect.Slice || k == reflect.Array:
		return "an array"
	case k == reflect.Map || k == reflect.Struct:
		return "an object"
	}
	return "another value"
}

// scalarJSON converts a path or query string to the JSON value of its
// field's kind, in strict canonical form (SPEC §6.2) as the body is. A
// number is written as a JSON number; every spelling of an integer (5, 5.0,
// 5e0) is one where an integer is declared.
func scalarJSON(kind reflect.Kind, s string) (json.RawMessage, error) {
	var v json.RawMessage
	switch kind {
	case reflect.String:
		if err := canonical.CheckString(s); err != nil {
			return nil, err
		}
		v = jsonValue(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("want true or false, got %q", s)
		}
		return jsonValue(b), nil
	default:
		if s == "" || !(s[0] == '-' || isDigit(s[0])) || !isDigit(s[len(s)-1]) || !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("want %s, got %q", numberWords(kind), s)
		}
		v = json.RawMessage(s)
	}
	canon, err := canonical.TransformStrict(v)
	var se *canonical.SyntaxError
	if errors.As(err, &se) {
		return nil, errors.New(se.Reason())
	}
	// Within ±MaxExactInteger the canonical form of an integer has neither
	// a fraction nor an exponent.
	if kind != reflect.String && numberWords(kind) == "an integer" && bytes.ContainsAny(canon, ".e") {
		return nil, fmt.Errorf("want an integer, got %q", s)
	}
	return canon, err
}

// numberWords names a numeric kind as JSON Schema does.
func numberWords(kind reflect.Kind) string {
	if kind == reflect.Float32 || kind == reflect.Float64 {
		return "a number"
	}
	return "an integer"
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
