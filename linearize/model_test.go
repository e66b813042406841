package linearize

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The model is one attempt record (SPEC §6.3), seen through the answers
// of keyed calls. Histories are partitioned by record, (principal, key), so
// the state is one record.
//
// An executed call is two operations of the history, both spanning the
// call's interval: the call itself, which takes the record (the
// reservation), and its finish, after which the record is final (no caller
// may see it in flight any more). The record goes from in flight to final
// at a moment no call observes; the model lets any observation that needs
// a final record (a replay, an indeterminate answer) make that move, and
// an in-flight answer is only possible before it.
//
// A transactional operation (SPEC §6.7) takes the record uncommitted: no
// read can see it, so every same-key request answers in flight, whatever
// its body, and nothing else. Its commit makes the record final at once
// (committed is final); a 422 or a replay observes the commit. A call that
// failed is rolled back whole: it is split likewise into the call, which
// takes the record uncommitted, and its release, after which the record is
// absent again and the key runs afresh. A record taken by an ambiguous
// call of a transactional operation may have rolled back: until its commit
// is observed, it may revert to absent at any moment no call observes.
//
// A raw operation (SPEC §15, the path of idem proxy) is not transactional:
// its record is read like any other while in flight. But a handler error
// marked NotDispatched frees the key (store.Release): such a call is split
// like a rolled-back one, into the call, which takes the record in flight
// (readable: same body in flight, another body reused), and its release,
// after which the record is absent again. A record taken by an ambiguous
// call whose body may answer NotDispatched may likewise revert to absent
// until it is seen final.

// result classifies one answer.
type result int

const (
	// executed: this call ran the handler (fresh 2xx, a stored 4xx, or a
	// 5xx after the start, with meta.idempotency.replayed false).
	executed result = iota
	// replay: replayed true, with the original executionId and status.
	replay
	// inFlight: 409 IDEMPOTENCY_KEY_IN_FLIGHT.
	inFlight
	// indeterminate: 409 IDEMPOTENCY_RESULT_INDETERMINATE.
	indeterminate
	// reused: 422 IDEMPOTENCY_KEY_REUSED.
	reused
	// notStored: an answer that takes no record (503 STORE_UNAVAILABLE).
	notStored
	// ambiguous: client timeout or network error; the call may or may not
	// have taken the record, and nothing is known of its answer.
	ambiguous
	// rolledBack: a transactional call that ran and failed, rolled back
	// whole (a 5xx with retryable true and meta.executionId, replayed
	// false).
	rolledBack
	// freed: a raw call whose handler answered NotDispatched (503
	// UPSTREAM_UNAVAILABLE, retryable, with meta.executionId): its key was
	// released.
	freed
	// finished: the finish half of an executed call.
	finished
	// released: the release half of a rolled-back call.
	released
)

var resultNames = [...]string{"executed", "replay", "in-flight", "indeterminate", "reused", "not-stored", "ambiguous", "rolled-back", "freed", "finished", "released"}

func (r result) String() string { return resultNames[r] }

// input is one call: the record it names and the request body it sent
// (bodies are numbered per record; equal numbers are equal fingerprints).
type input struct {
	Record string
	Body   int
	// Tx marks a call of a transactional operation (SPEC §6.7); every call
	// of a record has the same.
	Tx bool
	// Frees marks a call of a raw operation whose body may answer
	// NotDispatched (and so free the key).
	Frees bool
	// Finish marks the second half of a call: the finish of an executed
	// one, the release of a rolled-back or freed one (by its output's
	// result).
	Finish bool
}

// output is what the call observed.
type output struct {
	Result result
	// ExecutionID is the execution the answer names: the new one when
	// executed, the original one on a replay or an indeterminate answer.
	ExecutionID string
	Status      int
}

// outcome is how a taken record ends.
type outcome int8

const (
	unknownOutcome outcome = iota // taken by an ambiguous call: not known yet
	completedOutcome
	indeterminateOutcome
	rolledBackOutcome // a transactional execution that failed, or a raw one not dispatched: being released
)

// record is the state of one attempt record. It is comparable, so states
// compare with ==.
type record struct {
	Taken bool
	// Body is the fingerprint the record was taken with.
	Body int
	// ExecutionID and Status of the one execution; empty/0 while unknown
	// (taken by an ambiguous call and not observed since).
	ExecutionID string
	Status      int
	Outcome     outcome
	// Final: completed or indeterminate, no longer in flight; for a
	// transactional operation, committed.
	Final bool
	// Frees: taken by an ambiguous call whose body may answer
	// NotDispatched, so the record may be released unobserved.
	Frees bool
}

func (r record) String() string {
	if !r.Taken {
		return "absent"
	}
	phase := "in flight"
	if r.Final {
		phase = "final"
	}
	out := [...]string{"?", "completed", "indeterminate", "releasing"}[r.Outcome]
	exe := r.ExecutionID
	if exe == "" {
		exe = "?"
	}
	return fmt.Sprintf("body %d, %s, %s %s/%d", r.Body, phase, out, exe, r.Status)
}

// step returns every state the record may be in after the call, none when
// the answer is impossible from s.
func step(s record, in input, out output) []record {
	var next []record
	for _, from := range unobserved(s, in) {
		for _, to := range stepFrom(from, in, out) {
			if !slices.Contains(next, to) {
				next = append(next, to)
			}
		}
	}
	return next
}

// unobserved returns s and the states it may have moved to meanwhile
// without any call observing it: a transactional record taken by an
// ambiguous call (its execution unknown) and not seen committed may have
// rolled back; a raw one whose taker's body may answer NotDispatched, not
// seen final, may have been released.
func unobserved(s record, in input) []record {
	if (in.Tx || s.Frees) && s.Taken && !s.Final && s.ExecutionID == "" {
		return []record{s, {}}
	}
	return []record{s}
}

func stepFrom(s record, in input, out output) []record {
	if in.Finish {
		switch {
		case !s.Taken || s.ExecutionID != out.ExecutionID:
		case out.Result == released && s.Outcome == rolledBackOutcome:
			return []record{{}}
		case out.Result == finished && s.Outcome != rolledBackOutcome:
			// The executor's own answer is written after the record is
			// final.
			s.Final = true
			return []record{s}
		}
		return nil
	}
	switch out.Result {
	case notStored:
		if !in.Tx {
			return []record{s}
		}
		// A transactional call whose commit was cut off: it may have
		// committed, or rolled back; as ambiguous.
		fallthrough
	case ambiguous:
		// Either nothing happened, or this call took the record (and then
		// its execution, result and outcome are unknown).
		next := []record{s}
		if !s.Taken {
			next = append(next, record{Taken: true, Body: in.Body, Frees: in.Frees})
		}
		return next
	case executed:
		// At most one execution per record, ever.
		if s.Taken {
			return nil
		}
		o := completedOutcome
		if out.Status >= 500 {
			if in.Tx {
				return nil // a transactional failure rolls back
			}
			o = indeterminateOutcome
		}
		return []record{{Taken: true, Body: in.Body, ExecutionID: out.ExecutionID, Status: out.Status, Outcome: o}}
	case rolledBack, freed:
		// Only a transactional call rolls back, only a raw one whose body
		// may be NotDispatched is freed; either took the absent record.
		if s.Taken || (out.Result == rolledBack && !in.Tx) || (out.Result == freed && !in.Frees) {
			return nil
		}
		return []record{{Taken: true, Body: in.Body, ExecutionID: out.ExecutionID, Status: out.Status, Outcome: rolledBackOutcome}}
	}
	if !s.Taken {
		return nil
	}
	if in.Tx {
		return observeTx(s, in, out)
	}
	switch out.Result {
	case reused:
		// The fingerprint is checked first, whatever the record's state.
		if s.Body != in.Body {
			return []record{s}
		}
		return nil
	}
	// The answers below are only for the record's own fingerprint.
	if s.Body != in.Body {
		return nil
	}
	switch out.Result {
	case inFlight:
		if !s.Final {
			return []record{s}
		}
	case replay:
		if (s.Outcome == unknownOutcome || s.Outcome == completedOutcome) && sameOrUnknown(s.ExecutionID, out.ExecutionID) && (s.Status == 0 || s.Status == out.Status) {
			s.ExecutionID, s.Status, s.Outcome, s.Final = out.ExecutionID, out.Status, completedOutcome, true
			return []record{s}
		}
	case indeterminate:
		if (s.Outcome == unknownOutcome || s.Outcome == indeterminateOutcome) && sameOrUnknown(s.ExecutionID, out.ExecutionID) {
			s.ExecutionID, s.Outcome, s.Final = out.ExecutionID, indeterminateOutcome, true
			return []record{s}
		}
	}
	return nil
}

// observeTx is stepFrom for answers read from the taken record s of a
// transactional operation: uncommitted, every same-key request answers in
// flight; committed, the record answers as a completed one (never
// indeterminate: a failure leaves no record).
func observeTx(s record, in input, out output) []record {
	if out.Result == inFlight {
		if !s.Final {
			return []record{s}
		}
		return nil
	}
	if s.Outcome == rolledBackOutcome || s.Outcome == indeterminateOutcome {
		return nil // rolling back: nothing to read
	}
	// The answer observes the commit, now if not before.
	s.Final, s.Outcome = true, completedOutcome
	switch out.Result {
	case reused:
		if s.Body != in.Body {
			return []record{s}
		}
	case replay:
		if s.Body == in.Body && out.Status < 500 && sameOrUnknown(s.ExecutionID, out.ExecutionID) && (s.Status == 0 || s.Status == out.Status) {
			s.ExecutionID, s.Status = out.ExecutionID, out.Status
			return []record{s}
		}
	}
	return nil
}

func sameOrUnknown(have, got string) bool { return have == "" || have == got }

// attemptPartition splits a history by record, records sorted by name.
func attemptPartition(history []porcupine.Operation) [][]porcupine.Operation {
	byRecord := map[string][]porcupine.Operation{}
	var names []string
	for _, op := range history {
		r := op.Input.(input).Record
		if _, ok := byRecord[r]; !ok {
			names = append(names, r)
		}
		byRecord[r] = append(byRecord[r], op)
	}
	slices.Sort(names)
	out := make([][]porcupine.Operation, 0, len(names))
	for _, n := range names {
		out = append(out, byRecord[n])
	}
	return out
}

// attemptModel is the porcupine model of one attempt record per partition.
var attemptModel = (&porcupine.NondeterministicModel{
	Partition: attemptPartition,
	Init:      func() []any { return []any{record{}} },
	Step: func(state, in, out any) []any {
		var next []any
		for _, s := range step(state.(record), in.(input), out.(output)) {
			next = append(next, s)
		}
		return next
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(input), out.(output)
		if i.Finish {
			verb := "finish"
			if o.Result == released {
				verb = "release"
			}
			return fmt.Sprintf("%s %s %s", i.Record, verb, o.ExecutionID)
		}
		s := fmt.Sprintf("%s body %d → %s", i.Record, i.Body, o.Result)
		if i.Tx {
			s = fmt.Sprintf("%s (tx) body %d → %s", i.Record, i.Body, o.Result)
		}
		if i.Frees {
			s = fmt.Sprintf("%s (raw, may be NotDispatched) body %d → %s", i.Record, i.Body, o.Result)
		}
		if o.ExecutionID != "" {
			s += fmt.Sprintf(" %s/%d", o.ExecutionID, o.Status)
		}
		return s
	},
	DescribeState: func(state any) string { return state.(record).String() },
}).ToModel()
