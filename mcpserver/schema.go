package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/idem-run/idem"
)

// The schemas of the reserved arguments.
var (
	keySchema = json.RawMessage(fmt.Sprintf(`{"type":"string","minLength":1,"maxLength":%d,"pattern":"^[A-Za-z0-9._~:/+=@-]+$",`+
		`"description":"Idempotency key of this intent: generate it once (e.g. a UUID), keep it in durable task state before the first call, `+
		`and resend it with identical arguments after an ambiguous outcome."}`, idem.MaxKeyLength))
	dryRunSchema = json.RawMessage(`{"type":"boolean","description":"true previews the call without changing anything; send no idempotencyKey with it."}`)
)

// toolSchema is the operation's input schema plus the reserved arguments
// its contract takes, members kept in their order ("additionalProperties":
// false included).
func toolSchema(t Tool) (json.RawMessage, error) {
	raw := t.InputSchema
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
	}
	schema, err := parseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	var typ string
	if v, ok := get(schema, "type"); !ok || json.Unmarshal(v, &typ) != nil || typ != "object" {
		return nil, errors.New(`input schema: "type" must be "object"`)
	}
	props := []member{}
	if v, ok := get(schema, "properties"); ok {
		if props, err = parseObject(v); err != nil {
			return nil, fmt.Errorf("input schema properties: %w", err)
		}
	}
	for _, p := range props {
		if p.name == ArgIdempotencyKey || p.name == ArgDryRun && t.Retry.Preview {
			return nil, fmt.Errorf("argument %q collides with the reserved MCP argument of that name; rename the field", p.name)
		}
	}
	var required []string
	if v, ok := get(schema, "required"); ok {
		if err := json.Unmarshal(v, &required); err != nil {
			return nil, fmt.Errorf("input schema required: %w", err)
		}
	}
	if t.Retry.Kind == idem.RetrySameKeyReplay {
		props = append(props, member{ArgIdempotencyKey, keySchema})
		required = append(required, ArgIdempotencyKey)
	}
	if t.Retry.Preview {
		props = append(props, member{ArgDryRun, dryRunSchema})
	}
	schema = set(schema, "properties", encodeObject(props))
	if len(required) > 0 {
		r, _ := json.Marshal(required)
		schema = set(schema, "required", r)
	}
	return encodeObject(schema), nil
}

// member is one name and value of a JSON object, which this file keeps in
// order.
type member struct {
	name  string
	value json.RawMessage
}

// parseObject splits a JSON object into its members, in order.
func parseObject(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{name, v})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("not a JSON object")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("data after the object")
	}
	return out, nil
}

// encodeObject joins members into a compact JSON object.
func encodeObject(ms []member) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(m.name)
		b.Write(name)
		b.WriteByte(':')
		_ = json.Compact(&b, m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func get(ms []member, name string) (json.RawMessage, bool) {
	i := slices.IndexFunc(ms, func(m member) bool { return m.name == name })
	if i < 0 {
		return nil, false
	}
	return ms[i].value, true
}

// set replaces name's value, or appends it.
func set(ms []member, name string, v json.RawMessage) []member {
	if i := slices.IndexFunc(ms, func(m member) bool { return m.name == name }); i >= 0 {
		ms[i].value = v
		return ms
	}
	return append(ms, member{name, v})
}

// ownsDryRun reports whether dryRun is an argument of the operation itself
// (a body member its input schema declares), not the control argument:
// only where the operation has no preview, which the registry checks (an
// idem gateway tool's dryRun, SPEC §17 rulings). Elsewhere a dryRun
// argument is the control one, so a dryRun: true sent to a tool without a
// preview is refused rather than run live.
func ownsDryRun(t Tool) bool {
	if t.Retry.Preview || t.Locations[ArgDryRun] != "" {
		return false
	}
	schema, err := parseObject(t.InputSchema)
	if err != nil {
		return false
	}
	v, ok := get(schema, "properties")
	if !ok {
		return false
	}
	props, err := parseObject(v)
	return err == nil && slices.ContainsFunc(props, func(m member) bool { return m.name == ArgDryRun })
}
