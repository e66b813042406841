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
	// finished: the finish half of an executed call.
	finished
)

var resultNames = [...]string{"executed", "replay", "in-flight", "indeterminate", "reused", "not-stored", "ambiguous", "finished"}

func (r result) String() string { return resultNames[r] }

// input is one call: the record it names and the request body it sent
// (bodies are numbered per record; equal numbers are equal fingerprints).
type input struct {
	Record string
	Body   int
	// Transactional marks a record of a transactional operation (SPEC
	// §6.7): until its transaction commits there is no record to compare
	// fingerprints with, so a same-key call with any body is answered in
	// flight while it runs.
	Transactional bool
	// Finish marks the finish half of an executed call.
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
	// Final: completed or indeterminate, no longer in flight.
	Final bool
}

func (r record) String() string {
	if !r.Taken {
		return "absent"
	}
	phase := "in flight"
	if r.Final {
		phase = "final"
	}
	out := [...]string{"?", "completed", "indeterminate"}[r.Outcome]
	exe := r.ExecutionID
	if exe == "" {
		exe = "?"
	}
	return fmt.Sprintf("body %d, %s, %s %s/%d", r.Body, phase, out, exe, r.Status)
}

// step returns every state the record may be in after the call, none when
// the answer is impossible from s.
func step(s record, in input, out output) []record {
	if in.Finish {
		// The executor's own answer is written after the record is final.
		if s.Taken && s.ExecutionID == out.ExecutionID {
			s.Final = true
			return []record{s}
		}
		return nil
	}
	switch out.Result {
	case ambiguous:
		// Either nothing happened, or this call took the record (and then
		// its execution, result and outcome are unknown).
		next := []record{s}
		if !s.Taken {
			next = append(next, record{Taken: true, Body: in.Body})
		}
		return next
	case executed:
		// At most one execution per record, ever.
		if s.Taken {
			return nil
		}
		o := completedOutcome
		if out.Status >= 500 {
			o = indeterminateOutcome
		}
		return []record{{Taken: true, Body: in.Body, ExecutionID: out.ExecutionID, Status: out.Status, Outcome: o}}
	case reused:
		// The fingerprint is checked first, whatever the record's state.
		if s.Taken && s.Body != in.Body {
			return []record{s}
		}
		return nil
	case notStored:
		return []record{s}
	case inFlight:
		if in.Transactional && s.Taken && !s.Final && s.Body != in.Body {
			return []record{s}
		}
	}
	// The answers below are only for the record's own fingerprint.
	if !s.Taken || s.Body != in.Body {
		return nil
	}
	switch out.Result {
	case inFlight:
		if !s.Final {
			return []record{s}
		}
	case replay:
		if s.Outcome != indeterminateOutcome && sameOrUnknown(s.ExecutionID, out.ExecutionID) && (s.Status == 0 || s.Status == out.Status) {
			s.ExecutionID, s.Status, s.Outcome, s.Final = out.ExecutionID, out.Status, completedOutcome, true
			return []record{s}
		}
	case indeterminate:
		if s.Outcome != completedOutcome && sameOrUnknown(s.ExecutionID, out.ExecutionID) {
			s.ExecutionID, s.Outcome, s.Final = out.ExecutionID, indeterminateOutcome, true
			return []record{s}
		}
	}
	return nil
}

func sameOrUnknown(have, got string) bool { return have == "" || have == got }

// attemptModel is the porcupine model of one attempt record per partition.
var attemptModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
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
	},
	Init: func() []any { return []any{record{}} },
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
			return fmt.Sprintf("%s finish %s", i.Record, o.ExecutionID)
		}
		s := fmt.Sprintf("%s body %d → %s", i.Record, i.Body, o.Result)
		if o.ExecutionID != "" {
			s += fmt.Sprintf(" %s/%d", o.ExecutionID, o.Status)
		}
		return s
	},
	DescribeState: func(state any) string { return state.(record).String() },
}).ToModel()
