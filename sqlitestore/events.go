package sqlitestore

import (
	"encoding/json"
	"time"

	"github.com/idem-run/idem"
)

// An execution's audit events live in its row of idem_records, in the
// column events: a JSON array of idem.AuditEvent in their JSON form (type,
// at, attempt, code, previousErrorCode, attempts, durationMs, data), in
// order. at is RFC 3339 in UTC at the store's precision (microseconds), so
// it reads back as the instant written. The store alone writes the column,
// always as a compact array of objects ("[]" or "[{…},…,{…}]"), which is
// what lets appendEventsSQL append by text instead of parsing the array.
// Events appended later (AppendEvents) are rows of idem_audit_events
// instead, each in the same JSON form (migration 008).

// encodeEvents is the JSON array of events as stored, or nil (SQL NULL)
// for none; an event without a time happens now.
func encodeEvents(events []idem.AuditEvent, now time.Time) (any, error) {
	if len(events) == 0 {
		return nil, nil
	}
	out := make([]idem.AuditEvent, len(events))
	for i, ev := range events {
		if ev.At.IsZero() {
			ev.At = now
		}
		ev.At = ev.At.UTC().Truncate(time.Microsecond)
		out[i] = ev
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// decodeEvents reads the stored events of execution id.
func decodeEvents(id, text string) ([]idem.AuditEvent, error) {
	events := []idem.AuditEvent{}
	if err := json.Unmarshal([]byte(text), &events); err != nil {
		return nil, err
	}
	for i := range events {
		events[i].ExecutionID = id
	}
	return events, nil
}

// appendEventsSQL is the SET term that appends the array of encodeEvents in
// parameter p (an SQL parameter such as "?3"; NULL appends nothing) to
// events, in the statement that updates the row: the array's closing
// bracket gives way to the new elements. Each element is an object, so
// the stored text ends in "}]" unless it is "[]".
func appendEventsSQL(p string) string {
	return `events = CASE WHEN ` + p + ` IS NULL THEN events WHEN events = '[]' THEN ` + p +
		` ELSE substr(events, 1, length(events) - 1) || ',' || substr(` + p + `, 2) END`
}
