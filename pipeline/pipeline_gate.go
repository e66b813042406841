package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// evaluatePolicies runs stage 6: the runner's policies, then the
// operation's, all of them, under one timeout. It returns the decision
// when the call needs approval (its reason, the rule that asked, the
// approver role), nil when it may run.
func (x *execution) evaluatePolicies(ctx context.Context, in any, raw json.RawMessage) (*idem.PolicyDecision, *idem.Error) {
	m := x.op.meta
	d := idem.PolicyDecision{Effect: idem.Allow} // no policy allows
	configured := x.configured()
	if n := len(x.r.cfg.Policies) + len(x.op.Policies()) + len(configured); n > 0 {
		policies := append(append(append(make([]idem.Policy, 0, n), x.r.cfg.Policies...), configured...), x.op.Policies()...)
		pctx, cancel := context.WithTimeout(ctx, x.r.cfg.PolicyTimeout)
		defer cancel()
		var record []string
		var err error
		d, record, err = idem.EvaluatePolicies(pctx, policies, idem.PolicyInput{Operation: m, Principal: x.inv.Principal, Input: in, RawInput: raw})
		x.policyLog = record
		if err != nil {
			return nil, idem.AsError(err)
		}
	}
	switch {
	case d.Effect == idem.Deny:
		return nil, withRule(idem.Errorf(idem.CodePolicyDenied, "denied by policy: %s", d.Reason).WithDetail("reason", d.Reason), d.Rule)
	case d.Effect == idem.RequireApproval && m.Approval == idem.ApprovalNone:
		// The operation declares it takes no approvals, so asking for one
		// cannot be honoured: refuse rather than run unapproved.
		return nil, withRule(idem.Errorf(idem.CodePolicyDenied, "a policy requires approval, but operation %s takes none: %s", m.Name, d.Reason).WithDetail("reason", d.Reason), d.Rule)
	case d.Effect == idem.RequireApproval:
		return &d, nil
	case m.Approval == idem.ApprovalAlways:
		return &idem.PolicyDecision{Effect: idem.RequireApproval, Reason: fmt.Sprintf("operation %s always requires approval", m.Name)}, nil
	}
	return nil, nil
}

// withRule names the configured rule that decided in e's details.rule.
func withRule(e *idem.Error, rule string) *idem.Error {
	if rule != "" {
		e = e.WithDetail("rule", rule)
	}
	return e
}

// approvalGate runs stage 7: it returns the id of an approved approval of
// this intent, or the answer that stops the call: the pending approval to
// decide, or the rejection. For a keyed call the store first looks for the
// key's record, in the same transaction: a record that appeared since
// stage 5 (the execution this approval authorized, run by a concurrent
// same-key request) comes back as existing, to be answered as stage 5
// would.
func (x *execution) approvalGate(ctx context.Context, raw json.RawMessage, d *idem.PolicyDecision) (id string, existing *idem.Attempt, stop *idem.Error) {
	p := x.inv.Principal
	reason := d.Reason
	res, err := x.r.cfg.Store.RequestApproval(ctx, idem.RequestApprovalParams{
		ID: newID("apr_", x.r.cfg.Clock.Now()), Org: p.Org, RequestedBy: p.ID, Key: x.key, Operation: x.op.meta.Name,
		Fingerprint: x.fingerprint, Input: raw, Reason: reason, Expiry: x.r.cfg.ApprovalExpiry,
		Rule: d.Rule, ApproverRole: d.ApproverRole,
	})
	var ae *idem.AttemptExistsError
	if errors.As(err, &ae) {
		a := ae.Attempt
		if a.State == idem.AttemptInFlight {
			// Read it again through GetAttempt, which writes a passed lease
			// down before answering it (docs/store.md): the approval's
			// transaction only read it.
			again, gerr := x.r.cfg.Store.GetAttempt(ctx, idem.GetAttemptParams{Scope: p.Scope(), Key: x.key})
			if gerr == nil {
				a = again
			}
		}
		x.r.cache.put(a, x.r.cfg.Clock.Now())
		return "", &a, nil
	}
	if err != nil {
		return "", nil, storeFailure(ctx, err)
	}
	a := res.Approval
	switch a.Status {
	case idem.ApprovalApproved:
		return a.ID, nil, nil
	case idem.ApprovalRejected:
		decided := ""
		if a.DecisionReason != nil {
			decided = *a.DecisionReason
		}
		return "", nil, idem.Errorf(idem.CodeApprovalRejected, "approval %s for this exact request was rejected: %s", a.ID, decided).
			WithDetail("approvalId", a.ID).WithDetail("reason", decided)
	}
	return "", nil, withRule(idem.Errorf(idem.CodeApprovalRequired, "this request needs approval: %s; ask an approver (role %s) to approve %s, then send the same request again", reason, a.DecidedByRole(), a.ID).
		WithDetail("approvalId", a.ID).WithDetail("reason", reason), a.Rule)
}
