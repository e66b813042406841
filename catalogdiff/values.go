package catalogdiff

import (
	"encoding/json"
	"math/big"
	"sort"
)

// Helpers over decoded JSON values: nil, bool, string, json.Number,
// []any and map[string]any.

// equal reports whether two JSON values are the same, comparing numbers
// by value (1 and 1.0 are equal) and objects regardless of key order.
func equal(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	default:
		return a == b
	}
}

// num reads a JSON number.
func num(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// str reads a JSON string, "" for anything else.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// asObject reads a JSON object, empty for anything else.
func asObject(v any) map[string]any {
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return map[string]any{}
}

// setDiff treats two JSON arrays as sets (anything else as empty) and
// returns the members only in o and only in n, each sorted by their JSON.
func setDiff(o, n any) (removed, added []any) {
	ol, _ := o.([]any)
	nl, _ := n.([]any)
	in := func(v any, list []any) bool {
		for _, w := range list {
			if equal(v, w) {
				return true
			}
		}
		return false
	}
	for _, v := range ol {
		if !in(v, nl) && !in(v, removed) {
			removed = append(removed, v)
		}
	}
	for _, v := range nl {
		if !in(v, ol) && !in(v, added) {
			added = append(added, v)
		}
	}
	byJSON := func(list []any) {
		sort.SliceStable(list, func(i, j int) bool { return compact(list[i]) < compact(list[j]) })
	}
	byJSON(removed)
	byJSON(added)
	return removed, added
}

// compact renders a JSON value compactly, object keys sorted.
func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "not JSON"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// unionKeys returns the keys of a and b, sorted.
func unionKeys[V any](a, b map[string]V) []string {
	seen := make(map[string]bool, len(a)+len(b))
	out := make([]string, 0, len(a)+len(b))
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}
