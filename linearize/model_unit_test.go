package linearize

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestModel checks the model on hand-written histories, so that the
// checker's verdicts on real ones mean what they say.
func TestModel(t *testing.T) {
	call := func(client, body int, from, to int64, res result, exe string, status int) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: input{Record: "k", Body: body}, Call: from, Return: to, Output: output{Result: res, ExecutionID: exe, Status: status}}
	}
	txCall := func(client, body int, from, to int64, res result, exe string, status int) porcupine.Operation {
		op := call(client, body, from, to, res, exe, status)
		op.Input = input{Record: "k", Body: body, Transactional: true}
		return op
	}
	finish := func(client int, from, to int64, exe string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: input{Record: "k", Finish: true}, Call: from, Return: to, Output: output{Result: finished, ExecutionID: exe}}
	}
	const never = 1 << 40
	tests := []struct {
		name    string
		history []porcupine.Operation
		ok      bool
	}{
		{"execute then replay", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 11, 12, replay, "e1", 201)}, true},
		{"in flight during the execution", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 2, 3, inFlight, "", 409)}, true},
		{"in flight after the executor answered", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 11, 12, inFlight, "", 409)}, false},
		{"in flight after a replay", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 2, 3, replay, "e1", 201), call(2, 0, 4, 5, inFlight, "", 409)}, false},
		{"two executions", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 0, 10, executed, "e2", 201), finish(1, 0, 10, "e2")}, false},
		{"replay of another execution", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 11, 12, replay, "e2", 201)}, false},
		{"replay with another status", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 11, 12, replay, "e1", 200)}, false},
		{"other body is reused", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 1, 11, 12, reused, "", 422)}, true},
		{"other body replays", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 1, 11, 12, replay, "e1", 201)}, false},
		{"other body in flight", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 1, 2, 3, inFlight, "", 409)}, false},
		{"transactional: other body in flight", []porcupine.Operation{txCall(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), txCall(1, 1, 2, 3, inFlight, "", 409)}, true},
		{"transactional: other body in flight after the executor answered", []porcupine.Operation{txCall(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), txCall(1, 1, 11, 12, inFlight, "", 409)}, false},
		{"reused before anything ran", []porcupine.Operation{call(1, 1, 0, 1, reused, "", 422), call(0, 0, 2, 10, executed, "e1", 201), finish(0, 2, 10, "e1")}, false},
		{"failed execution is indeterminate", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 500), finish(0, 0, 10, "e1"), call(1, 0, 11, 12, indeterminate, "e1", 409)}, true},
		{"failed execution replays", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 500), finish(0, 0, 10, "e1"), call(1, 0, 11, 12, replay, "e1", 500)}, false},
		{"completed execution is indeterminate", []porcupine.Operation{call(0, 0, 0, 10, executed, "e1", 201), finish(0, 0, 10, "e1"), call(1, 0, 11, 12, indeterminate, "e1", 409)}, false},
		{"ambiguous call took the record", []porcupine.Operation{call(0, 0, 0, never, ambiguous, "", 0), call(1, 0, 5, 6, inFlight, "", 409), call(2, 0, 7, 8, replay, "e9", 201), call(3, 0, 9, 10, replay, "e9", 201)}, true},
		{"ambiguous call did not take it", []porcupine.Operation{call(0, 1, 0, never, ambiguous, "", 0), call(1, 0, 5, 10, executed, "e1", 201), finish(1, 5, 10, "e1"), call(2, 1, 11, 12, reused, "", 422)}, true},
		{"ambiguous execution replayed two ways", []porcupine.Operation{call(0, 0, 0, never, ambiguous, "", 0), call(2, 0, 7, 8, replay, "e9", 201), call(3, 0, 9, 10, replay, "e8", 201)}, false},
		{"ambiguous execution and an executed one", []porcupine.Operation{call(0, 0, 0, never, ambiguous, "", 0), call(2, 0, 7, 8, replay, "e9", 201), call(1, 0, 9, 12, executed, "e1", 201), finish(1, 9, 12, "e1")}, false},
		{"store unavailable changes nothing", []porcupine.Operation{call(0, 0, 0, 1, notStored, "", 503), call(1, 0, 2, 10, executed, "e1", 201), finish(1, 2, 10, "e1")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(attemptModel, tt.history); got != tt.ok {
				t.Errorf("CheckOperations = %v, want %v", got, tt.ok)
			}
		})
	}
}
