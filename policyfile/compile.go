package policyfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"

	"github.com/idem-run/idem"
)

// MaxCost bounds a rule: CEL's estimate of its worst case, with every
// string of the arguments MaxArgBytes long and every list MaxArgBytes/2
// items long, must not exceed it (or the file is refused), and a run is
// stopped past it (POLICY_FAILED). A rule's cost cannot grow with the
// input beyond it: a few passes over the largest list fit, a loop in a
// loop does not.
const MaxCost = 10_000_000

// MaxArgBytes is the size the cost estimate assumes for every string and
// list it cannot bound otherwise: the largest request body (1 MiB).
const MaxArgBytes = 1 << 20

// Options are what a catalog does not say about its operations.
type Options struct {
	// Upstream names an operation's upstream (operation.upstream in CEL);
	// nil: "".
	Upstream func(operation string) string
}

// Set is a compiled file: its rules, ready to run on the operations they
// were compiled for, and its limits.
type Set struct {
	rules  []*rule
	ops    map[string]*opRules
	limits []*limit
	// opLimits are the limits that apply to each operation compiled for,
	// in file order: a call looks them up instead of matching globs.
	opLimits map[string]opLimits
	// skipped are the operations a glob or a side effect matches that a
	// rule's condition cannot read (a field their input lacks); applied
	// counts those its condition compiled for.
	skipped map[*rule][]skip
	applied map[*rule]int
	// noApproval are the operations a require_approval rule matches that
	// take no approvals (approval: none): their calls it asks about are
	// denied.
	noApproval map[*rule][]string
}

type rule struct {
	Rule
	sel selector
}

// names reports whether the rule names op without a glob.
func (r *rule) names(op string) bool {
	for _, p := range r.Operations {
		if p == op {
			return true
		}
	}
	return false
}

// skip is an operation a rule does not apply to, and why.
type skip struct {
	op  string
	err error
}

// opRules are the rules that apply to one operation, in file order.
type opRules struct {
	args   *shape
	op     map[string]any
	checks []check
}

type check struct {
	rule *rule
	prg  cel.Program // nil: no condition
}

// Compile checks f against the operations of a catalog and compiles it.
// Every error names its rule (or limit) and, for a condition, the
// operation and CEL's message.
func Compile(f File, ops []idem.Descriptor, opt Options) (*Set, error) {
	s := &Set{ops: map[string]*opRules{}, skipped: map[*rule][]skip{}, applied: map[*rule]int{}, noApproval: map[*rule][]string{}}
	known := make(map[string]bool, len(ops))
	for _, d := range ops {
		known[d.Name] = true
	}
	var errs []error
	names := map[string]bool{}
	for i, r := range f.Policies {
		if err := checkRule(r, known); err != nil {
			errs = append(errs, fmt.Errorf("policies[%d] %q: %w", i, r.Name, err))
			continue
		}
		if names[r.Name] {
			errs = append(errs, fmt.Errorf("policies[%d] %q: the name is used twice", i, r.Name))
			continue
		}
		names[r.Name] = true
		s.rules = append(s.rules, &rule{Rule: r, sel: selector{r.Operations, r.SideEffects}})
	}
	for i, l := range f.Limits {
		lim, err := newLimit(l, known)
		if err != nil {
			errs = append(errs, fmt.Errorf("limits[%d] %q: %w", i, l.Name, err))
			continue
		}
		if names["limit:"+l.Name] {
			errs = append(errs, fmt.Errorf("limits[%d] %q: the name is used twice", i, l.Name))
			continue
		}
		names["limit:"+l.Name] = true
		s.limits = append(s.limits, lim)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Every condition compiles on its own, so that a rule that matches no
	// operation yet is still checked.
	for _, r := range s.rules {
		if r.When == "" {
			continue
		}
		env, err := newEnv(&shape{typ: cel.MapType(cel.StringType, cel.DynType), kind: "map"}, nil)
		if err == nil {
			_, err = compileWhen(env, r.When)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("policy %q: %w", r.Name, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(s.limits) > 0 {
		s.opLimits = make(map[string]opLimits, len(ops))
		for _, d := range ops {
			s.opLimits[d.Name] = opLimits{d.SideEffect, s.matching(d.Metadata)}
		}
	}
	for _, d := range ops {
		or, err := s.compileFor(d, opt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if or != nil {
			s.ops[d.Name] = or
		}
	}
	for _, r := range s.rules {
		if sk := s.skipped[r]; len(sk) > 0 && s.applied[r] == 0 {
			errs = append(errs, fmt.Errorf("policy %q: operation %s: %w (and no operation it matches has every field it reads)", r.Name, sk[0].op, sk[0].err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Warnings say which operations a rule matches but does not apply to,
// because their input lacks a field its condition reads, and which a
// require_approval rule matches that take no approvals.
func (s *Set) Warnings() []string {
	var out []string
	for _, r := range s.rules {
		if sk := s.skipped[r]; len(sk) > 0 {
			ops := make([]string, len(sk))
			for i, k := range sk {
				ops[i] = k.op
			}
			out = append(out, fmt.Sprintf("policy %q does not apply to %s: their input lacks a field its condition reads", r.Name, strings.Join(ops, ", ")))
		}
		if ops := s.noApproval[r]; len(ops) > 0 {
			out = append(out, fmt.Sprintf("policy %q asks approval for %s, which take none (approval: none): those calls are denied (POLICY_DENIED); declare approval: policy for them (a proxy's or gateway's --contracts overlay)", r.Name, strings.Join(ops, ", ")))
		}
	}
	return out
}

func checkRule(r Rule, known map[string]bool) error {
	if r.Name == "" {
		return errors.New("name is required")
	}
	switch r.Outcome {
	case idem.Deny, idem.Allow:
		if r.ApproverRole != "" {
			return errors.New("approverRole is only for outcome require_approval")
		}
	case idem.RequireApproval:
	default:
		return fmt.Errorf("outcome %q is not one of deny, require_approval, allow", r.Outcome)
	}
	return selector{r.Operations, r.SideEffects}.check(known)
}

// compileFor compiles the rules that apply to d, with args typed by its
// input schema; nil when none applies.
func (s *Set) compileFor(d idem.Descriptor, opt Options) (*opRules, error) {
	var or *opRules
	var env *cel.Env
	var errs []error
	for _, r := range s.rules {
		if !r.sel.matches(d.Metadata) {
			continue
		}
		if or == nil {
			upstream := ""
			if opt.Upstream != nil {
				upstream = opt.Upstream(d.Name)
			}
			or = &opRules{op: map[string]any{"name": d.Name, "sideEffect": string(d.SideEffect), "retryKind": string(d.Retry.Kind), "upstream": upstream}}
		}
		if r.Outcome == idem.RequireApproval && (d.Approval == idem.ApprovalNone || d.Approval == "") {
			s.noApproval[r] = append(s.noApproval[r], d.Name)
		}
		c := check{rule: r}
		if r.When != "" {
			if env == nil {
				objects := map[string]*shape{}
				or.args = shapeOf(d.InputSchema, "idem.args."+typeSegment(strings.ReplaceAll(d.Name, ".", "_")), objects)
				var err error
				if env, err = newEnv(or.args, objects); err != nil {
					return nil, fmt.Errorf("operation %s: %w", d.Name, err)
				}
			}
			prg, err := compileWhen(env, r.When)
			if err != nil && !r.names(d.Name) && strings.Contains(err.Error(), "undefined field") {
				// Matched by a glob or a side effect only: the rule does
				// not apply to an operation whose input lacks a field it
				// reads (Compile refuses it if that leaves it none).
				s.skipped[r] = append(s.skipped[r], skip{d.Name, err})
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("policy %q: operation %s: %w", r.Name, d.Name, err))
				continue
			}
			s.applied[r]++
			c.prg = prg
		}
		or.checks = append(or.checks, c)
	}
	return or, errors.Join(errs...)
}

// newEnv is the CEL environment of one operation: principal, operation and
// args (of type args).
func newEnv(args *shape, objects map[string]*shape) (*cel.Env, error) {
	all := map[string]*shape{principalShape.name: principalShape, operationShape.name: operationShape}
	for n, o := range objects {
		all[n] = o
	}
	return cel.NewEnv(
		cel.CustomTypeProvider(&provider{Registry: types.NewEmptyRegistry(), objects: all}),
		cel.CrossTypeNumericComparisons(true),
		cel.Variable("principal", principalShape.typ),
		cel.Variable("operation", operationShape.typ),
		cel.Variable("args", args.typ),
	)
}

// compileWhen parses, type-checks (to bool) and bounds one condition.
func compileWhen(env *cel.Env, when string) (cel.Program, error) {
	ast, iss := env.Compile(when)
	if iss.Err() != nil {
		return nil, errors.New(strings.TrimSpace(iss.Err().Error()))
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("when must be a bool, not %s", ast.OutputType())
	}
	est, err := env.EstimateCost(ast, sizes{})
	if err != nil {
		return nil, fmt.Errorf("its cost cannot be estimated: %v", err)
	}
	if est.Max > MaxCost {
		return nil, fmt.Errorf("its estimated cost (up to %d) exceeds the limit of %d with arguments up to %d bytes: bound the loops, or test sizes first", est.Max, MaxCost, MaxArgBytes)
	}
	return env.Program(ast, cel.CostLimit(MaxCost), cel.EvalOptions(cel.OptOptimize))
}

// sizes tells CEL's estimator how large a call's values can be: a string
// of the arguments up to MaxArgBytes, a list or map up to MaxArgBytes/2
// items; the principal's and the operation's up to maxNameBytes.
type sizes struct{}

// maxNameBytes bounds a principal's or an operation's string, and the
// principal's roles.
const maxNameBytes = 256

func (sizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	p := n.Path()
	if len(p) == 0 {
		return nil
	}
	if p[0] != "args" {
		return &cost.SizeEstimate{Min: 0, Max: maxNameBytes}
	}
	if k := n.Type().Kind(); k == types.StringKind || k == types.BytesKind {
		return &cost.SizeEstimate{Min: 0, Max: MaxArgBytes}
	}
	return &cost.SizeEstimate{Min: 0, Max: MaxArgBytes / 2}
}

func (sizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// Rules and Limits count the set's rules and limits.
func (s *Set) Rules() int  { return len(s.rules) }
func (s *Set) Limits() int { return len(s.limits) }

// Policy returns the rules as one idem.Policy: it applies the rules that
// match the call's operation in file order and decides for the strongest
// outcome (deny > require_approval > allow; the first such rule's reason).
// A condition that fails at run time fails the call closed, naming its
// rule (POLICY_FAILED).
func (s *Set) Policy() idem.Policy {
	return idem.Policy{Name: "policies", Evaluate: s.decide, Bounded: true}
}

func (s *Set) decide(ctx context.Context, in idem.PolicyInput) (idem.PolicyDecision, error) {
	d := idem.PolicyDecision{Effect: idem.Allow, Rules: []idem.RuleDecision{}}
	or := s.ops[in.Operation.Name]
	if or == nil {
		for _, r := range s.rules {
			if r.sel.matches(in.Operation) {
				return d, idem.Errorf(idem.CodePolicyFailed, "rule %s applies to operation %s, which the policies were not compiled for: reload the policies", r.Name, in.Operation.Name).WithDetail("rule", r.Name)
			}
		}
		return d, nil
	}
	var act interpreter.Activation
	for _, c := range or.checks {
		if c.prg != nil {
			if act == nil {
				args, err := decodeArgs(in.RawInput, or.args)
				if err != nil {
					return d, idem.Errorf(idem.CodePolicyFailed, "rule %s could not read the arguments, so the call was refused: %v", c.rule.Name, err).WithDetail("rule", c.rule.Name)
				}
				// One activation for every rule of the call.
				if act, err = interpreter.NewActivation(map[string]any{"principal": principalValue(in.Principal), "operation": or.op, "args": args}); err != nil {
					return d, idem.Errorf(idem.CodePolicyFailed, "the policies could not read the call: %v", err)
				}
			}
			out, _, err := c.prg.Eval(act)
			if err != nil {
				return d, idem.Errorf(idem.CodePolicyFailed, "rule %s could not be evaluated, so the call was refused: %v", c.rule.Name, err).WithDetail("rule", c.rule.Name)
			}
			if out != types.True {
				continue
			}
		}
		d.Rules = append(d.Rules, idem.RuleDecision{Rule: c.rule.Name, Effect: c.rule.Outcome})
		if c.rule.Outcome.Outranks(d.Effect) || d.Rule == "" && c.rule.Outcome == d.Effect {
			d.Effect, d.Rule, d.Reason, d.ApproverRole = c.rule.Outcome, c.rule.Name, c.rule.reason(), c.rule.ApproverRole
		}
	}
	return d, nil
}

// Limit takes a token for a call from every limit that applies
// (pipeline.Rules): nil, or 429 RATE_LIMITED naming the limit.
func (s *Set) Limit(p idem.Principal, m idem.Metadata, now time.Time) *idem.Error {
	if l := s.Take(p, m, now); l != nil {
		return l.Error()
	}
	return nil
}

// reason is the rule's reason, or one naming it.
func (r *rule) reason() string {
	if r.Reason != "" {
		return r.Reason
	}
	return "rule " + r.Name + " decided " + string(r.Outcome)
}

// decodeArgs decodes the call's validated input for CEL. Its numbers are
// exact as float64: stage 4 refuses integers beyond ±(2^53−1).
func decodeArgs(raw json.RawMessage, s *shape) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("the input is not a JSON object")
	}
	return s.value(v), nil
}

func principalValue(p idem.Principal) map[string]any {
	roles := p.Roles
	if roles == nil {
		roles = []string{}
	}
	return map[string]any{"org": p.Org, "id": p.ID, "kind": string(p.Kind), "roles": roles}
}
