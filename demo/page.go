package demo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idem-run/idem"
)

// Every list read answers one page (docs/demo.md, "Bounds"): at most
// ?limit= rows in the list's order (listLimitDefault when absent, at most
// listLimitMax), and nextCursor, the ?cursor= of the next page (null on the
// last one). A page is one range scan of an index that ends in the list's
// sort key, so its cost grows with the limit, never with the list.
// Each list's input declares limit (1…listLimitMax) and cursor (at most
// maxCursorLen characters) in its jsonschema tags.
const (
	listLimitDefault = 100
	listLimitMax     = 100
	// The gateway ledger is the demo's proof of effects, read whole by
	// tests and scripts: its pages are larger.
	ledgerLimitMax = 1000
	maxCursorLen   = 1024
)

// cursorHelp is what a bad cursor's 400 tells the caller to do.
const cursorHelp = "not a cursor this list gave out; pass the previous page's nextCursor unchanged, or leave cursor out for the first page"

// sortKey is a list's order: columns that identify a row among the list's
// rows, compared in order.
type sortKey []keyColumn

// keyColumn is one column of a sort key: BIGINT (a time) or TEXT.
type keyColumn struct {
	name string
	text bool
}

// The lists' sort keys.
var (
	byCreated = sortKey{{name: "created_at"}, {name: "id", text: true}}
	bySlug    = sortKey{{name: "slug", text: true}}
	byBackend = sortKey{{name: "name", text: true}, {name: "environment", text: true}}
	byAttempt = sortKey{{name: "attempted_at"}, {name: "id", text: true}}
	byArrival = sortKey{{name: "created_at"}, {name: "handler_key", text: true}}
)

func (k sortKey) columns() string {
	names := make([]string, len(k))
	for i, c := range k {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// after is the condition "row comes after the cursor's row": a row value
// comparison, which both SQLite and PostgreSQL serve from the index.
func (k sortKey) after() string {
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(k)), ", ")
	if len(k) == 1 {
		return k[0].name + " > " + marks
	}
	return "(" + k.columns() + ") > (" + marks + ")"
}

// encodeCursor makes the cursor that points after a row with key values.
func encodeCursor(values []any) *string {
	raw, _ := json.Marshal(values)
	s := base64.RawURLEncoding.EncodeToString(raw)
	return &s
}

// decodeCursor reads a cursor of this sort key: nil for "", else the key
// values of the row the previous page ended with. A cursor that is not one
// (another list's, edited, NUL in a text value a store cannot hold) is
// 400 INVALID_INPUT.
func (k sortKey) decodeCursor(cursor string) ([]any, error) {
	if cursor == "" {
		return nil, nil
	}
	bad := errPageParam("cursor", "%s", cursorHelp)
	if len(cursor) > maxCursorLen {
		return nil, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !utf8.Valid(raw) {
		return nil, bad
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) != len(k) {
		return nil, bad
	}
	values := make([]any, len(k))
	for i, c := range k {
		if c.text {
			var s string
			if err := json.Unmarshal(parts[i], &s); err != nil || strings.ContainsRune(s, 0) {
				return nil, bad
			}
			values[i] = s
			continue
		}
		var n int64
		if err := json.Unmarshal(parts[i], &n); err != nil {
			return nil, bad
		}
		values[i] = n
	}
	return values, nil
}

// pageLimit is the limit a list reads: limit, or listLimitDefault for 0.
// The operations' schemas bound limit to 1…listLimitMax; the ledger passes
// its own, up to ledgerLimitMax.
func pageLimit(limit int) int {
	if limit <= 0 {
		return listLimitDefault
	}
	return min(limit, ledgerLimitMax)
}

// readPage reads one page of a list. q is the list's SELECT up to and
// including its WHERE clause (the equality conditions that name the list);
// readPage adds the cursor's condition, ORDER BY the sort key and a LIMIT
// of one more row than the page, which tells whether another page follows.
// scan returns a row and the values of its sort key.
func readPage[T any](ctx context.Context, tx *Tx, key sortKey, limit int, cursor string, q string, args []any,
	scan func(rowScanner) (T, []any, error)) ([]T, *string, error) {
	after, err := key.decodeCursor(cursor)
	if err != nil {
		return nil, nil, err
	}
	limit = pageLimit(limit)
	args = append([]any(nil), args...)
	if after != nil {
		q += " AND " + key.after()
		args = append(args, after...)
	}
	q += " ORDER BY " + key.columns() + " LIMIT ?"
	args = append(args, limit+1)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	type keyed struct {
		v   T
		key []any
	}
	all, err := collect(rows, func(r rowScanner) (keyed, error) {
		v, k, err := scan(r)
		return keyed{v, k}, err
	})
	if err != nil {
		return nil, nil, err
	}
	var next *string
	if len(all) > limit {
		all = all[:limit]
		next = encodeCursor(all[limit-1].key)
	}
	out := make([]T, len(all))
	for i, r := range all {
		out[i] = r.v
	}
	return out, next, nil
}

// errPageParam is the 400 INVALID_INPUT of a bad limit or cursor, shaped
// like the pipeline's own (details.errors).
func errPageParam(name, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	return idem.Errorf(idem.CodeInvalidInput, "invalid input: /%s: %s", name, msg).
		WithDetail("errors", []map[string]string{{"path": "/" + name, "message": msg}})
}
