package appended

import (
	"fmt"
	"testing"

	"github.com/idem-run/idem"
)

func TestMerge(t *testing.T) {
	ev := func(s string) idem.AuditEvent { return idem.AuditEvent{Type: s} }
	own := []idem.AuditEvent{ev("started"), ev("succeeded")}
	types := func(evs []idem.AuditEvent) string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Type)
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		extra []Event
		want  string
	}{
		{nil, "[started succeeded]"},
		{[]Event{{2, ev("r1")}, {2, ev("r2")}}, "[started succeeded r1 r2]"},
		{[]Event{{1, ev("r1")}, {2, ev("r2")}}, "[started r1 succeeded r2]"},
		{[]Event{{0, ev("r0")}, {1, ev("r1")}}, "[r0 started r1 succeeded]"},
		{[]Event{{5, ev("r5")}}, "[started succeeded r5]"}, // past the array: after it
	} {
		if got := types(Merge(own, c.extra)); got != c.want {
			t.Errorf("Merge(%v) = %s, want %s", c.extra, got, c.want)
		}
	}
}
