package catalogdiff

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Report is the JSON form of a diff: {"changes": [...], "widening": n,
// "narrowing": n, "neutral": n}.
type Report struct {
	Changes []Change `json:"changes"`
	Counts
}

// NewReport counts changes into a report; no changes is an empty list.
func NewReport(changes []Change) Report {
	if changes == nil {
		changes = []Change{}
	}
	return Report{Changes: changes, Counts: Count(changes)}
}

// WriteJSON writes the report as one indented JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteText writes one line per change, the widenings first, then the
// narrowings, then the neutral changes, each group in the diff's order,
// and a last summary line:
//
//	widening   gadget.create  retry.kind  "same_key_replay" -> "no_automatic_retry"  the operation must …
//	2 widening, 0 narrowing, 1 neutral
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, class := range []Class{Widening, Narrowing, Neutral} {
		for _, c := range r.Changes {
			if c.Class != class {
				continue
			}
			op := c.Operation
			if c.DirectCLI {
				op += " (direct CLI)"
			}
			if op == "" {
				op = "(catalog)"
			}
			path := c.Path
			if path == "" {
				path = "(operation)"
			}
			fmt.Fprintf(&b, "%-9s  %s  %s  %s -> %s  %s\n", c.Class, op, path, short(c.Old), short(c.New), c.Reason)
		}
	}
	if len(r.Changes) == 0 {
		b.WriteString("no changes\n")
	} else {
		fmt.Fprintf(&b, "%d widening, %d narrowing, %d neutral\n", r.Widening, r.Narrowing, r.Neutral)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// short renders a value for a text line: compact JSON, at most 60
// characters, "-" when absent.
func short(v any) string {
	if v == nil {
		return "-"
	}
	s := compact(v)
	if r := []rune(s); len(r) > 60 {
		s = string(r[:59]) + "…"
	}
	return s
}
