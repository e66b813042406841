package pipeline

import (
	"github.com/idem-run/idem"

	"strings"
	"time"
)

// Rules are configured policies and rate limits (SPEC §8.1; policyfile.Set
// implements it). The runner asks them on every call; SetRules swaps them
// (a reload), and a call keeps the rules it started with.
type Rules interface {
	// Policy is the rules as one policy, evaluated after Config.Policies
	// and before the operation's own.
	Policy() idem.Policy
	// Limit takes a token for a call of p to m at now from every limit
	// that applies, or refuses it (429 RATE_LIMITED, taking none). It is
	// asked once the call would run: after its policies, before the
	// approval gate and the reservation of its key.
	Limit(p idem.Principal, m idem.Metadata, now time.Time) *idem.Error
}

// rulesHolder is the runner's current rules, with their policy built once.
type rulesHolder struct {
	rules    Rules
	policies []idem.Policy
}

// SetRules replaces the configured rules (nil: none); calls that evaluated
// their policies before finish under the old ones.
func (r *Runner) SetRules(rs Rules) {
	if rs == nil {
		r.rules.Store(nil)
		return
	}
	r.rules.Store(&rulesHolder{rules: rs, policies: []idem.Policy{rs.Policy()}})
}

// configured is the configured rules' policy, if any, from the rules
// the call holds from now on (its limits are the same set's).
func (x *execution) configured() []idem.Policy {
	x.loadRules()
	if x.rules != nil {
		return x.rules.policies
	}
	return nil
}

// loadRules takes the rules the call holds from now on, once: stage 5's
// fold (stage5Folded) and stage 6 see the same set even across a reload.
func (x *execution) loadRules() *rulesHolder {
	if !x.rulesLoaded {
		x.rules, x.rulesLoaded = x.r.rules.Load(), true
	}
	return x.rules
}

// limit asks the configured limits about this call.
func (x *execution) limit() *idem.Error {
	h := x.rules
	if h == nil {
		return nil
	}
	e := h.rules.Limit(x.inv.Principal, x.op.meta, x.r.cfg.Clock.Now())
	if e != nil {
		x.limited, _ = e.Details["limit"].(string)
	}
	return e
}

// policyEvents are the audit events of stage 6's decisions, one per
// policy or configured rule that decided ("policy.decided", data: rule,
// outcome), at the time the call began.
func (x *execution) policyEvents() []idem.AuditEvent {
	if len(x.policyLog) == 0 {
		return nil
	}
	events := make([]idem.AuditEvent, 0, len(x.policyLog))
	for _, d := range x.policyLog {
		rule, outcome := d, ""
		if i := strings.LastIndexByte(d, '='); i >= 0 { // an effect has no '='
			rule, outcome = d[:i], d[i+1:]
		}
		events = append(events, idem.AuditEvent{ExecutionID: x.executionID, Type: idem.EventPolicyDecided, At: x.start,
			Data: map[string]string{"rule": rule, "outcome": outcome}})
	}
	return events
}
