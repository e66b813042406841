package idem

import (
	"context"
	"encoding/json"
	"fmt"
)

// Effect is a policy's verdict.
type Effect string

// The policy effects, in ascending precedence: deny beats
// require_approval, which beats allow.
const (
	Allow           Effect = "allow"
	RequireApproval Effect = "require_approval"
	Deny            Effect = "deny"
)

func (e Effect) rank() int {
	switch e {
	case Allow:
		return 0
	case RequireApproval:
		return 1
	}
	return 2 // deny, and anything unknown fails closed
}

// Outranks reports whether e beats other (deny > require_approval > allow).
func (e Effect) Outranks(other Effect) bool { return e.rank() > other.rank() }

// PolicyDecision is what a policy decided and why.
type PolicyDecision struct {
	Effect Effect
	Reason string
	// Rule names the configured rule (SPEC §8.1) that decided; empty for a
	// Go-coded policy. Answers carry it in details.rule, approvals in rule.
	Rule string
	// ApproverRole is the role that may decide the approval a
	// require_approval asks for; empty: RoleApprover.
	ApproverRole string
	// Rules, when not nil, are the decisions of the configured rules that
	// applied, recorded (audit, span, log) in place of the policy's own.
	Rules []RuleDecision
}

// RuleDecision is one configured rule's outcome on a call.
type RuleDecision struct {
	Rule   string
	Effect Effect
}

// PolicyInput is what a policy sees of a call.
type PolicyInput struct {
	Operation Metadata
	Principal Principal
	// Input is the decoded input (the operation's In type, by value).
	Input any
	// RawInput is the validated input as JSON.
	RawInput json.RawMessage
}

// Policy decides whether a call may run. Every policy that applies is
// evaluated; one that returns an error, panics or outlives the runner's
// policy timeout fails the call closed (403 POLICY_FAILED).
type Policy struct {
	Name     string
	Evaluate func(ctx context.Context, in PolicyInput) (PolicyDecision, error)
	// Bounded says that Evaluate neither blocks nor runs unbounded (the
	// configured rules: CEL under a cost limit), so it runs on the
	// caller's goroutine, without the timeout's; a panic still fails the
	// call closed.
	Bounded bool
}

// PolicyFor builds a Policy over an operation's typed input. Calls whose
// input is not an In are allowed by it (the policy does not apply).
func PolicyFor[In any](name string, evaluate func(ctx context.Context, p Principal, in In) (PolicyDecision, error)) Policy {
	return Policy{Name: name, Evaluate: func(ctx context.Context, pi PolicyInput) (PolicyDecision, error) {
		in, ok := pi.Input.(In)
		if !ok {
			return PolicyDecision{Effect: Allow}, nil
		}
		return evaluate(ctx, pi.Principal, in)
	}}
}

// EvaluatePolicies runs every policy and combines them by precedence; the
// returned decision is the first strongest policy's. A failure is
// POLICY_FAILED (a policy's own POLICY_FAILED error is returned as it is:
// a configured rule names itself in it). The record is "name=effect" for
// each policy, or for each of a policy's Rules.
func EvaluatePolicies(ctx context.Context, policies []Policy, in PolicyInput) (PolicyDecision, []string, error) {
	final := PolicyDecision{Effect: Allow}
	var record []string
	for _, p := range policies {
		d, err := evaluateOne(ctx, p, in)
		if e, ok := err.(*Error); ok && e.Code == CodePolicyFailed {
			return PolicyDecision{}, record, e
		}
		if err != nil {
			return PolicyDecision{}, record, Errorf(CodePolicyFailed, "policy %s could not be evaluated, so the call was refused: %v", p.Name, err)
		}
		if d.Rules == nil {
			record = append(record, p.Name+"="+string(d.Effect))
		}
		for _, r := range d.Rules {
			record = append(record, r.Rule+"="+string(r.Effect))
		}
		if d.Effect.rank() > final.Effect.rank() {
			final = d
		}
	}
	return final, record, nil
}

func evaluateOne(ctx context.Context, p Policy, in PolicyInput) (d PolicyDecision, err error) {
	if p.Bounded {
		defer func() {
			if v := recover(); v != nil {
				d, err = PolicyDecision{}, fmt.Errorf("panic: %v", v)
			}
		}()
		d, err = p.Evaluate(ctx, in)
		if err == nil && d.Effect != Allow && d.Effect != Deny && d.Effect != RequireApproval {
			err = fmt.Errorf("unknown effect %q", d.Effect)
		}
		return d, err
	}
	type result struct {
		d   PolicyDecision
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- result{err: fmt.Errorf("panic: %v", v)}
			}
		}()
		d, err := p.Evaluate(ctx, in)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		if r.err == nil && r.d.Effect != Allow && r.d.Effect != Deny && r.d.Effect != RequireApproval {
			r.err = fmt.Errorf("unknown effect %q", r.d.Effect)
		}
		return r.d, r.err
	case <-ctx.Done():
		return PolicyDecision{}, fmt.Errorf("no decision in time: %w", ctx.Err())
	}
}
