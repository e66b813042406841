package idem_test

import (
	"testing"

	"github.com/idem-run/idem"
)

// SPEC §17 rulings: the problems of a key in flight and of a reused key
// carry SEP-3182's type in details.type, beside the code; other details
// are kept and the error's own map is not changed.
func TestProblemCarriesTheProposalType(t *testing.T) {
	e := idem.Errorf(idem.CodeIdempotencyKeyReused, "reused").WithDetail("x", 1)
	p := idem.NewProblem(e, nil)
	if p.Details["type"] != "idempotency_key_conflict" || p.Details["x"] != 1 || e.Details["type"] != nil {
		t.Fatalf("details %v, the error's %v", p.Details, e.Details)
	}
	if p := idem.NewProblem(idem.Errorf(idem.CodeIdempotencyKeyInFlight, "running"), nil); p.Details["type"] != "idempotency_key_in_progress" {
		t.Fatalf("in flight: %v", p.Details)
	}
	if p := idem.NewProblem(idem.Errorf(idem.CodeInvalidInput, "bad"), nil); p.Details["type"] != nil {
		t.Fatalf("invalid input: %v", p.Details)
	}
}
