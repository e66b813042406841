package linearize

import (
	"slices"
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestModel checks the model on hand-written histories, so that the
// checker's verdicts on real ones mean what they say.
func TestModel(t *testing.T) {
	call := func(client, body int, from, to int64, res result, exe string, status int) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: input{Record: "k", Body: body}, Call: from, Return: to, Output: output{Result: res, ExecutionID: exe, Status: status}}
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

// TestModelTransactional checks the model's transactional steps (SPEC
// §6.7) on hand-written histories: the uncommitted window, rolled-back
// failures that free the key, and ambiguous calls that may have rolled
// back.
func TestModelTransactional(t *testing.T) {
	call := func(client, body int, from, to int64, res result, exe string, status int) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: input{Record: "k", Body: body, Tx: true}, Call: from, Return: to, Output: output{Result: res, ExecutionID: exe, Status: status}}
	}
	half := func(client int, from, to int64, res result, exe string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: input{Record: "k", Tx: true, Finish: true}, Call: from, Return: to, Output: output{Result: res, ExecutionID: exe}}
	}
	executes := func(client, body int, from, to int64, exe string, status int) []porcupine.Operation {
		return []porcupine.Operation{call(client, body, from, to, executed, exe, status), half(client, from, to, finished, exe)}
	}
	rollsBack := func(client, body int, from, to int64, exe string) []porcupine.Operation {
		return []porcupine.Operation{call(client, body, from, to, rolledBack, exe, 500), half(client, from, to, released, exe)}
	}
	h := func(parts ...any) []porcupine.Operation {
		var out []porcupine.Operation
		for _, p := range parts {
			switch p := p.(type) {
			case porcupine.Operation:
				out = append(out, p)
			case []porcupine.Operation:
				out = append(out, p...)
			}
		}
		return out
	}
	const never = 1 << 40
	tests := []struct {
		name    string
		history []porcupine.Operation
		ok      bool
	}{
		{"execute then replay", h(executes(0, 0, 0, 10, "e1", 201), call(1, 0, 11, 12, replay, "e1", 201)), true},
		{"declared error replays", h(executes(0, 0, 0, 10, "e1", 409), call(1, 0, 11, 12, replay, "e1", 409)), true},
		{"other body in flight while uncommitted", h(executes(0, 0, 0, 10, "e1", 201), call(1, 1, 2, 3, inFlight, "", 409)), true},
		{"in flight after the commit was seen", h(executes(0, 0, 0, 10, "e1", 201), call(1, 0, 2, 3, replay, "e1", 201), call(2, 1, 4, 5, inFlight, "", 409)), false},
		{"in flight after a 422 saw the commit", h(executes(0, 0, 0, 10, "e1", 201), call(1, 1, 2, 3, reused, "", 422), call(2, 0, 4, 5, inFlight, "", 409)), false},
		{"in flight after the executor answered", h(executes(0, 0, 0, 10, "e1", 201), call(1, 0, 11, 12, inFlight, "", 409)), false},
		{"a 5xx execution is not transactional", h(executes(0, 0, 0, 10, "e1", 500), call(1, 0, 11, 12, indeterminate, "e1", 409)), false},
		{"rolled back, then the key runs afresh", h(rollsBack(0, 0, 0, 10, "e1"), executes(1, 0, 11, 20, "e2", 201), call(2, 0, 21, 22, replay, "e2", 201)), true},
		{"rolled back twice, other bodies", h(rollsBack(0, 0, 0, 10, "e1"), rollsBack(1, 1, 11, 20, "e2"), executes(2, 2, 21, 30, "e3", 201)), true},
		{"in flight, any body, while rolling back", h(rollsBack(0, 0, 0, 10, "e1"), call(1, 1, 2, 3, inFlight, "", 409), call(2, 0, 4, 5, inFlight, "", 409)), true},
		{"in flight after the rollback", h(rollsBack(0, 0, 0, 10, "e1"), call(1, 0, 11, 12, inFlight, "", 409)), false},
		{"rolled back, then replayed", h(rollsBack(0, 0, 0, 10, "e1"), call(1, 0, 11, 12, replay, "e1", 500)), false},
		{"rolled back, then indeterminate", h(rollsBack(0, 0, 0, 10, "e1"), call(1, 0, 11, 12, indeterminate, "e1", 409)), false},
		{"rolled back, then reused", h(rollsBack(0, 0, 0, 10, "e1"), call(1, 1, 11, 12, reused, "", 422)), false},
		{"reused while rolling back", h(rollsBack(0, 0, 0, 10, "e1"), call(1, 1, 2, 3, reused, "", 422)), false},
		{"rolled back while another executes", h(executes(0, 0, 0, 10, "e1", 201), rollsBack(1, 0, 11, 20, "e2")), false},
		{"overlapping rollbacks in turn", h(rollsBack(0, 0, 0, 10, "e1"), rollsBack(1, 0, 0, 10, "e2")), true},
		{"ambiguous call rolled back, then the key runs afresh", h(call(0, 0, 0, never, ambiguous, "", 0), call(1, 0, 1, 2, inFlight, "", 409), executes(2, 0, 3, 10, "e1", 201), call(3, 1, 11, 12, reused, "", 422)), true},
		{"ambiguous call committed, then another execution", h(call(0, 0, 0, never, ambiguous, "", 0), call(1, 0, 1, 2, replay, "e9", 201), executes(2, 0, 3, 10, "e1", 201)), false},
		{"ambiguous call committed, then in flight", h(call(0, 0, 0, never, ambiguous, "", 0), call(1, 1, 1, 2, reused, "", 422), call(2, 0, 3, 4, inFlight, "", 409)), false},
		{"commit cut off (503) may have committed", h(call(0, 0, 0, 10, notStored, "", 503), call(1, 0, 11, 12, replay, "e9", 201)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(attemptModel, tt.history); got != tt.ok {
				t.Errorf("CheckOperations = %v, want %v", got, tt.ok)
			}
		})
	}
	// Without the declaration, the same answers mean the old contract.
	t.Run("rolled back on a two-phase operation", func(t *testing.T) {
		ops := h(rollsBack(0, 0, 0, 10, "e1"))
		for i := range ops {
			in := ops[i].Input.(input)
			in.Tx = false
			ops[i].Input = in
		}
		if porcupine.CheckOperations(attemptModel, ops) {
			t.Error("a rolled-back answer of a two-phase operation was accepted")
		}
	})
	t.Run("ambiguous two-phase call never reverts", func(t *testing.T) {
		ops := h(call(0, 0, 0, never, ambiguous, "", 0), call(1, 0, 1, 2, inFlight, "", 409), executes(2, 0, 3, 10, "e1", 201))
		for i := range ops {
			in := ops[i].Input.(input)
			in.Tx = false
			ops[i].Input = in
		}
		if porcupine.CheckOperations(attemptModel, ops) {
			t.Error("a two-phase record taken by an ambiguous call was freed")
		}
	})
}

// TestModelFreed checks the model's steps for raw operations (SPEC §15):
// a call answered NotDispatched frees the key, its record readable (not
// uncommitted) until then, and an ambiguous call whose body may be
// NotDispatched may have freed it. Bodies 0 and 1 may be NotDispatched,
// body 2 may not.
func TestModelFreed(t *testing.T) {
	call := func(client, body int, from, to int64, res result, exe string, status int) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: input{Record: "k", Body: body, Frees: body < 2}, Call: from, Return: to, Output: output{Result: res, ExecutionID: exe, Status: status}}
	}
	half := func(client int, from, to int64, res result, exe string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: input{Record: "k", Finish: true}, Call: from, Return: to, Output: output{Result: res, ExecutionID: exe}}
	}
	executes := func(client, body int, from, to int64, exe string, status int) []porcupine.Operation {
		return []porcupine.Operation{call(client, body, from, to, executed, exe, status), half(client, from, to, finished, exe)}
	}
	frees := func(client, body int, from, to int64, exe string) []porcupine.Operation {
		return []porcupine.Operation{call(client, body, from, to, freed, exe, 503), half(client, from, to, released, exe)}
	}
	h := func(parts ...[]porcupine.Operation) []porcupine.Operation { return slices.Concat(parts...) }
	one := func(op porcupine.Operation) []porcupine.Operation { return []porcupine.Operation{op} }
	const never = 1 << 40
	tests := []struct {
		name    string
		history []porcupine.Operation
		ok      bool
	}{
		{"freed, then the same body runs afresh", h(frees(0, 0, 0, 10, "e1"), executes(1, 0, 11, 20, "e2", 201), one(call(2, 0, 21, 22, replay, "e2", 201))), true},
		{"freed, then another body runs", h(frees(0, 0, 0, 10, "e1"), executes(1, 2, 11, 20, "e2", 409), one(call(2, 0, 21, 22, reused, "", 422))), true},
		{"in flight while being freed", h(frees(0, 0, 0, 10, "e1"), one(call(1, 0, 2, 3, inFlight, "", 409))), true},
		{"reused while being freed", h(frees(0, 0, 0, 10, "e1"), one(call(1, 1, 2, 3, reused, "", 422))), true},
		{"another body in flight while being freed", h(frees(0, 0, 0, 10, "e1"), one(call(1, 1, 2, 3, inFlight, "", 409))), false},
		{"in flight after the release", h(frees(0, 0, 0, 10, "e1"), one(call(1, 0, 11, 12, inFlight, "", 409))), false},
		{"reused after the release", h(frees(0, 0, 0, 10, "e1"), one(call(1, 1, 11, 12, reused, "", 422))), false},
		{"freed, then replayed", h(frees(0, 0, 0, 10, "e1"), one(call(1, 0, 11, 12, replay, "e1", 503))), false},
		{"freed, then indeterminate", h(frees(0, 0, 0, 10, "e1"), one(call(1, 0, 11, 12, indeterminate, "e1", 409))), false},
		{"freed while another executes", h(executes(0, 0, 0, 10, "e1", 201), frees(1, 0, 11, 20, "e2")), false},
		{"a body that is never NotDispatched is not freed", h(frees(0, 2, 0, 10, "e1")), false},
		{"ambiguous call freed, then the key runs afresh", h(one(call(0, 0, 0, never, ambiguous, "", 0)), one(call(1, 0, 1, 2, inFlight, "", 409)), executes(2, 1, 3, 10, "e1", 201)), true},
		{"ambiguous call never freed if its body cannot be", h(one(call(0, 2, 0, never, ambiguous, "", 0)), one(call(1, 2, 1, 2, inFlight, "", 409)), executes(2, 1, 3, 10, "e1", 201)), false},
		{"ambiguous call seen indeterminate is not freed", h(one(call(0, 0, 0, never, ambiguous, "", 0)), one(call(1, 0, 1, 2, indeterminate, "e9", 409)), executes(2, 1, 3, 10, "e1", 201)), false},
		{"upstream 5xx is indeterminate", h(executes(0, 0, 0, 10, "e1", 500), one(call(1, 0, 11, 12, indeterminate, "e1", 409))), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(attemptModel, tt.history); got != tt.ok {
				t.Errorf("CheckOperations = %v, want %v", got, tt.ok)
			}
		})
	}
}
