// Package appended places the events appended to an execution later (rows
// of their own, each with how many of its record's own events preceded it
// when written) among the events its record carries: the timeline as it
// was written. Both stores read executions through it.
package appended

import "github.com/idem-run/idem"

// Event is an event appended to an execution with Pos, how many of its
// record's own events precede it.
type Event struct {
	Pos   int
	Event idem.AuditEvent
}

// Merge places each appended event after the first Pos of own, in order.
func Merge(own []idem.AuditEvent, extra []Event) []idem.AuditEvent {
	if len(extra) == 0 {
		return own
	}
	out := make([]idem.AuditEvent, 0, len(own)+len(extra))
	i := 0
	for _, a := range extra {
		for i < len(own) && i < a.Pos {
			out = append(out, own[i])
			i++
		}
		out = append(out, a.Event)
	}
	return append(out, own[i:]...)
}
