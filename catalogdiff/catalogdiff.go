// Package catalogdiff compares two operations catalogs (GET /v1/operations,
// SPEC §4) and classifies every change by what it does to a caller that
// automated the old one (SPEC §16):
//
//   - Widening: an assumption a caller could make from the old catalog is
//     no longer safe (a retry that was safe is not, a request that was
//     accepted is refused, a field it read is gone).
//   - Narrowing: a change that is safe for existing callers (a new
//     operation, an input that is no longer required, a safer contract).
//   - Neutral: wording and documentation (summaries, rationales,
//     descriptions), and fields this package does not know.
//
// Diff compares the catalogs structurally, never as text: the order of
// operations, of errors and of object keys does not matter. JSON Schemas
// are compared keyword by keyword (properties, required, type, enum,
// bounds, additionalProperties, items), to a bounded depth; a schema change
// it does not understand is a widening, to be reviewed. docs/catalog-drift.md
// has the table of rules.
package catalogdiff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Class is how a change affects callers of the old catalog.
type Class string

const (
	// Widening: a caller's earlier assumption becomes unsafe.
	Widening Class = "widening"
	// Narrowing: safe for existing callers.
	Narrowing Class = "narrowing"
	// Neutral: wording, documentation, or a field not classified.
	Neutral Class = "neutral"
)

// Change is one difference between two catalogs.
type Change struct {
	// Operation is the operation's name (its directCliOperations entry's
	// name when DirectCLI).
	Operation string `json:"operation"`
	// DirectCLI marks a change to an entry of directCliOperations.
	DirectCLI bool `json:"directCli,omitempty"`
	// Path is the changed field in the operation's entry, its keys joined
	// by dots ("retry.kind", "inputSchema.properties.color.enum",
	// "errors.GADGET_EXISTS"); empty when the whole operation was added or
	// removed.
	Path string `json:"path"`
	// Class is the classification.
	Class Class `json:"class"`
	// Old and New are the values before and after, as JSON values; nil
	// (null) when absent. For a set (required, enum, surfaces, errors)
	// they are the one member that was removed (Old) or added (New).
	Old any `json:"old"`
	New any `json:"new"`
	// Reason says, in one sentence, what the change means for a caller
	// and what it must now do.
	Reason string `json:"reason"`
}

// Counts are the numbers of changes of each class.
type Counts struct {
	Widening  int `json:"widening"`
	Narrowing int `json:"narrowing"`
	Neutral   int `json:"neutral"`
}

// Count counts changes by class.
func Count(changes []Change) Counts {
	var c Counts
	for _, ch := range changes {
		switch ch.Class {
		case Widening:
			c.Widening++
		case Narrowing:
			c.Narrowing++
		default:
			c.Neutral++
		}
	}
	return c
}

// Catalog is a parsed catalog, ready to compare.
type Catalog struct {
	ops    map[string]map[string]any
	direct map[string]map[string]any
	// extra holds top-level keys other than operations and
	// directCliOperations.
	extra map[string]any
}

// Operations returns the names of the catalog's operations, sorted.
func (c *Catalog) Operations() []string { return sortedKeys(c.ops) }

// Parse reads a catalog document: {"operations": [...],
// "directCliOperations": [...]}. Fields missing from an entry take their
// SPEC §3 defaults, so that a catalog written by an older idem compares
// with a newer one without spurious changes. Parse refuses a document that
// is not a catalog, saying which part is wrong.
func Parse(data []byte) (*Catalog, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not one JSON document: data follows the catalog object")
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a catalog: want a JSON object with an \"operations\" array, got %s", jsonKind(doc))
	}
	c := &Catalog{extra: map[string]any{}}
	var err error
	if c.ops, err = parseEntries(top, "operations", true); err != nil {
		return nil, err
	}
	if c.direct, err = parseEntries(top, "directCliOperations", false); err != nil {
		return nil, err
	}
	for k, v := range top {
		if k != "operations" && k != "directCliOperations" {
			c.extra[k] = v
		}
	}
	for _, name := range sortedKeys(c.ops) {
		if err := withOperationDefaults(c.ops[name]); err != nil {
			return nil, fmt.Errorf("not a catalog: operation %q: %v", name, err)
		}
	}
	for _, name := range sortedKeys(c.direct) {
		if err := withRetryDefaults(c.direct[name]); err != nil {
			return nil, fmt.Errorf("not a catalog: direct CLI operation %q: %v", name, err)
		}
		setDefault(c.direct[name], "summary", "")
	}
	return c, nil
}

// parseEntries reads top[key], an array of objects each with a unique,
// non-empty string name.
func parseEntries(top map[string]any, key string, required bool) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	raw, ok := top[key]
	if !ok || raw == nil {
		if required {
			return nil, fmt.Errorf("not a catalog: no %q array", key)
		}
		return out, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("not a catalog: %q is %s, want an array", key, jsonKind(raw))
	}
	for i, e := range list {
		entry, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("not a catalog: %s[%d] is %s, want an object", key, i, jsonKind(e))
		}
		name, _ := entry["name"].(string)
		if name == "" {
			return nil, fmt.Errorf("not a catalog: %s[%d] has no \"name\" string", key, i)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("not a catalog: %s[%d]: the name %q appears twice", key, i, name)
		}
		out[name] = entry
	}
	return out, nil
}

// withOperationDefaults fills the fields SPEC §3 defaults when absent; an
// object field that is not an object is an error.
func withOperationDefaults(op map[string]any) error {
	setDefault(op, "summary", "")
	setDefault(op, "idempotent", false)
	setDefault(op, "timeoutMs", json.Number("30000"))
	setDefault(op, "approval", "none")
	setDefault(op, "surfaces", []any{"cli", "http", "mcp"})
	setDefault(op, "errors", []any{})
	setDefault(op, "inputSchema", map[string]any{})
	setDefault(op, "outputSchema", map[string]any{})
	rr, err := object(op, "runtimeRetry")
	if err != nil {
		return err
	}
	setDefault(rr, "maxAttempts", json.Number("0"))
	setDefault(rr, "backoffMs", json.Number("250"))
	return withRetryDefaults(op)
}

func withRetryDefaults(entry map[string]any) error {
	r, err := object(entry, "retry")
	if err != nil {
		return err
	}
	setDefault(r, "keyRequired", false)
	setDefault(r, "preview", false)
	setDefault(r, "transactional", false)
	if _, ok := r["reconcile"]; !ok {
		r["reconcile"] = nil
	}
	return nil
}

// object returns m[key], an object, created empty when absent or null.
func object(m map[string]any, key string) (map[string]any, error) {
	switch v := m[key].(type) {
	case nil:
		o := map[string]any{}
		m[key] = o
		return o, nil
	case map[string]any:
		return v, nil
	default:
		return nil, fmt.Errorf("%q is %s, want an object", key, jsonKind(v))
	}
}

func setDefault(m map[string]any, key string, v any) {
	if cur, ok := m[key]; !ok || cur == nil {
		m[key] = v
	}
}

// Diff lists every change from old to new, sorted by operation (the
// catalog's operations first, then its direct CLI operations), then by
// path; changes at one path keep a fixed order. The same two catalogs
// always give the same list.
func Diff(old, new *Catalog) []Change {
	d := &differ{}
	for _, k := range unionKeys(old.extra, new.extra) {
		o, inOld := old.extra[k]
		n, inNew := new.extra[k]
		if inOld && inNew && equal(o, n) {
			continue
		}
		d.add(Change{Operation: "", Path: k, Class: Neutral, Old: o, New: n,
			Reason: fmt.Sprintf("the catalog's top-level %q is not a field this idem classifies; review it by hand", k)})
	}
	d.entries(old.ops, new.ops, false)
	d.entries(old.direct, new.direct, true)
	sort.SliceStable(d.changes, func(i, j int) bool {
		a, b := d.changes[i], d.changes[j]
		if a.DirectCLI != b.DirectCLI {
			return !a.DirectCLI
		}
		if a.Operation != b.Operation {
			return a.Operation < b.Operation
		}
		return a.Path < b.Path
	})
	return d.changes
}

// differ collects changes.
type differ struct {
	changes []Change
	// op and direct name the entry being compared.
	op     string
	direct bool
}

func (d *differ) add(c Change) { d.changes = append(d.changes, c) }

// change records a change of the current entry.
func (d *differ) change(path string, class Class, old, new any, reason string) {
	d.add(Change{Operation: d.op, DirectCLI: d.direct, Path: path, Class: class, Old: old, New: new, Reason: reason})
}

func (d *differ) entries(old, new map[string]map[string]any, direct bool) {
	d.direct = direct
	what := "operation"
	if direct {
		what = "direct CLI operation"
	}
	for _, name := range unionKeys(old, new) {
		d.op = name
		o, inOld := old[name]
		n, inNew := new[name]
		switch {
		case !inNew:
			d.change("", Widening, entryLabel(o, direct), nil,
				fmt.Sprintf("the %s is gone: calls to it now fail; remove them or move them to its replacement", what))
		case !inOld:
			d.change("", Narrowing, nil, entryLabel(n, direct),
				fmt.Sprintf("a new %s; nothing an existing caller does changes", what))
		case direct:
			d.directEntry(o, n)
		default:
			d.operation(o, n)
		}
	}
}

// entryLabel is how an added or removed entry shows: its route, or its
// command.
func entryLabel(e map[string]any, direct bool) any {
	if direct {
		return e["command"]
	}
	m, _ := e["method"].(string)
	p, _ := e["path"].(string)
	return m + " " + p
}
