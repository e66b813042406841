package policyfile_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/policyfile"
)

// FuzzDecide feeds a caller's arguments (any JSON, as idem proxy
// --validate=false forwards it) to compiled rules: a decision or a
// POLICY_FAILED naming a rule, never a panic or another error.
func FuzzDecide(f *testing.F) {
	pf, err := policyfile.Parse([]byte(rules))
	if err != nil {
		f.Fatal(err)
	}
	s, err := policyfile.Compile(pf, catalog(), policyfile.Options{})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{`{"amount":5000}`, `{"amount":"x"}`, `{"path":"/etc","tags":["weekend"]}`, `{"note":{"text":"stop"},"amount":1.5}`,
		`[]`, `null`, `{"amount":1e308}`, `{"tags":[1,{"a":[]}]}`, `{"path":"\u0000"}`} {
		f.Add(0, seed)
		f.Add(1, seed)
	}
	f.Fuzz(func(t *testing.T, op int, raw string) {
		if !json.Valid([]byte(raw)) {
			return
		}
		m := catalog()[(op%3+3)%3].Metadata
		d, _, err := idem.EvaluatePolicies(context.Background(), []idem.Policy{s.Policy()},
			idem.PolicyInput{Operation: m, Principal: idem.Principal{Org: "acme", ID: "a"}, RawInput: json.RawMessage(raw)})
		if err != nil {
			if idem.AsError(err).Code != idem.CodePolicyFailed {
				t.Fatalf("%s: %v", raw, err)
			}
			return
		}
		if d.Effect != idem.Allow && d.Rule == "" {
			t.Fatalf("%s: %+v without a rule", raw, d)
		}
	})
}
