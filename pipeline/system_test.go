package pipeline_test

import (
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
)

// ListExecutions applies GetExecution's visibility: approvers see the org,
// anyone else only their own executions, another org nothing.
func TestListExecutionsVisibility(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{refundOp(&runs), showOp()})
	ctx := t.Context()
	mine := refundCall(100, "small-1")
	expect(t, f.do(ctx, mine), 200, "")
	theirs := refundCall(200, "small-2")
	theirs.principal = agent2
	expect(t, f.do(ctx, theirs), 200, "")

	count := func(p idem.Principal, params idem.ListExecutionsParams) int {
		t.Helper()
		list, err := f.runner.ListExecutions(ctx, p, params)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range list {
			if !p.HasRole(idem.RoleApprover) && x.Principal != p.ID {
				t.Errorf("%s sees %s's execution %s", p.ID, x.Principal, x.ID)
			}
		}
		return len(list)
	}
	for _, c := range []struct {
		name   string
		p      idem.Principal
		params idem.ListExecutionsParams
		want   int
	}{
		{"approver sees the org", approver, idem.ListExecutionsParams{}, 2},
		{"approver filters by principal", approver, idem.ListExecutionsParams{Principal: "agent-2"}, 1},
		{"agent sees its own", agent, idem.ListExecutionsParams{}, 1},
		{"agent asking for another principal", agent, idem.ListExecutionsParams{Principal: "agent-2"}, 0},
		{"org is the caller's, whatever the params", agent, idem.ListExecutionsParams{Org: "globex"}, 1},
		{"another org", idem.Principal{Org: "globex", ID: "agent-9", Roles: []string{idem.RoleApprover}}, idem.ListExecutionsParams{}, 0},
		{"outcome filter", approver, idem.ListExecutionsParams{Outcome: idem.OutcomeFailed}, 0},
	} {
		if got := count(c.p, c.params); got != c.want {
			t.Errorf("%s: %d executions, want %d", c.name, got, c.want)
		}
	}
}
