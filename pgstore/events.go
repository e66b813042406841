package pgstore

import (
	"encoding/json"
	"time"

	"github.com/idem-run/idem"
)

// storedEvent is an audit event as it travels in its record's "events"
// array (migration 006): the time in unix microseconds, which is what
// timestamptz keeps, and each other field only when set.
type storedEvent struct {
	Type              string            `json:"type"`
	At                int64             `json:"at"`
	Attempt           int               `json:"attempt,omitempty"`
	Code              idem.Code         `json:"code,omitempty"`
	PreviousErrorCode idem.Code         `json:"previousErrorCode,omitempty"`
	Attempts          int               `json:"attempts,omitempty"`
	DurationMs        int64             `json:"durationMs,omitempty"`
	Data              map[string]string `json:"data,omitempty"`
}

// encodeEvents is events as a record's "events" array; an event without a
// time happens now.
func encodeEvents(events []idem.AuditEvent, now time.Time) ([]byte, error) {
	stored := make([]storedEvent, len(events))
	for i, ev := range events {
		at := ev.At
		if at.IsZero() {
			at = now
		}
		stored[i] = storedEvent{Type: ev.Type, At: at.UnixMicro(), Attempt: ev.Attempt, Code: ev.Code,
			PreviousErrorCode: ev.PreviousErrorCode, Attempts: ev.Attempts, DurationMs: ev.DurationMs, Data: ev.Data}
	}
	return json.Marshal(stored)
}

// decodeEvents reads a record's "events" array as the events of execution
// id.
func decodeEvents(b []byte, id string) ([]idem.AuditEvent, error) {
	var stored []storedEvent
	if err := json.Unmarshal(b, &stored); err != nil {
		return nil, err
	}
	events := make([]idem.AuditEvent, len(stored))
	for i, s := range stored {
		events[i] = idem.AuditEvent{ExecutionID: id, Type: s.Type, At: time.UnixMicro(s.At).UTC(), Attempt: s.Attempt,
			Code: s.Code, PreviousErrorCode: s.PreviousErrorCode, Attempts: s.Attempts, DurationMs: s.DurationMs, Data: s.Data}
	}
	return events, nil
}

// splitEvents divides the events of a finish of execution id into those
// of the execution itself (naming none, or id), which its record carries,
// and those naming another one, which are appended as rows.
func splitEvents(events []idem.AuditEvent, id string) (own, others []idem.AuditEvent) {
	for i, ev := range events {
		if ev.ExecutionID != "" && ev.ExecutionID != id {
			if others == nil {
				own = append(own, events[:i]...)
			}
			others = append(others, ev)
			continue
		}
		if others != nil {
			own = append(own, ev)
		}
	}
	if others == nil {
		return events, nil
	}
	return own, others
}

// finishEvents are the events of a finish of a record found by its key
// (Complete, Release), whose execution the statement learns only as it
// runs: own (naming none, or the execution the finish names) go in the
// statement, encoded, appended only if the record's execution is named
// (or named is ""); the others are appended as rows after it.
type finishEvents struct {
	own, others []idem.AuditEvent
	encoded     []byte
	named       string
}

// splitFinish splits fin's events as finishEvents says.
func splitFinish(fin idem.FinishParams, now time.Time) (finishEvents, error) {
	var f finishEvents
	f.own, f.others = splitEvents(fin.Events, fin.ExecutionID)
	for _, ev := range f.own {
		if ev.ExecutionID != "" {
			f.named = ev.ExecutionID
			break
		}
	}
	var err error
	f.encoded, err = encodeEvents(f.own, now)
	return f, err
}

// rows is what is left to append as rows once the record's execution id is
// known: the others, and own too when the record is not of the execution
// they named (the statement appended none of them then), those naming
// none given to the record.
func (f finishEvents) rows(id string) []idem.AuditEvent {
	if f.named == "" || f.named == id {
		return f.others
	}
	out := make([]idem.AuditEvent, 0, len(f.own)+len(f.others))
	for _, ev := range f.own {
		if ev.ExecutionID == "" {
			ev.ExecutionID = id
		}
		out = append(out, ev)
	}
	return append(out, f.others...)
}
