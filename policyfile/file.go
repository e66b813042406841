// Package policyfile reads the policies and rate limits of SPEC §8.1 from
// YAML, compiles each rule's CEL condition against the operations it
// applies to, and runs them: the rules as one idem.Policy that joins the
// Go-coded ones in SPEC §8's order, the limits as token buckets answered
// before a key is reserved.
//
// A file is compiled whole or refused whole: a condition that does not
// parse or type-check to bool, a field an operation's input does not
// declare, a rule whose estimated cost exceeds MaxCost, or an operation
// name (without a glob) the catalog does not have is an error naming the
// rule, and nothing of the file is used.
package policyfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/idem-run/idem"
)

// File is the YAML form of SPEC §8.1. Its zero value has no rules.
type File struct {
	Policies []Rule  `yaml:"policies"`
	Limits   []Limit `yaml:"limits"`
}

// Rule is one configured policy.
type Rule struct {
	// Name is unique in the file; answers, approvals and audit name it.
	Name string `yaml:"name"`
	// Operations are operation (or tool) names or globs (path.Match);
	// SideEffects side-effect classes. A rule applies to an operation
	// that matches both lists, an empty list matching everything.
	Operations  []string `yaml:"operations"`
	SideEffects []string `yaml:"sideEffects"`
	// When is an optional CEL condition over principal, operation and
	// args; without it the rule applies to every call it matches.
	When    string      `yaml:"when"`
	Outcome idem.Effect `yaml:"outcome"`
	// ApproverRole is the role that may decide an approval the rule asks
	// for (require_approval only; "approver" when empty).
	ApproverRole string `yaml:"approverRole"`
	// Reason is written for the caller: the message of the answer.
	Reason string `yaml:"reason"`
}

// Limit is one rate limit: a token bucket per principal, org or
// operation, over the operations it matches (as Rule's).
type Limit struct {
	Name        string   `yaml:"name"`
	Per         string   `yaml:"per"`
	Operations  []string `yaml:"operations"`
	SideEffects []string `yaml:"sideEffects"`
	// Rate is N/s, N/m or N/h; Burst the bucket's size (1 when 0).
	Rate  string `yaml:"rate"`
	Burst int    `yaml:"burst"`
}

// maxFileBytes bounds a policy file.
const maxFileBytes = 1 << 20

// Load reads and parses the file at name.
func Load(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return File{}, err
	}
	if len(b) > maxFileBytes {
		return File{}, fmt.Errorf("%s: larger than %d bytes", name, maxFileBytes)
	}
	pf, err := Parse(b)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", name, err)
	}
	return pf, nil
}

// Parse reads a policy file; an unknown key is an error.
func Parse(b []byte) (File, error) {
	var pf File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&pf); err != nil && !errors.Is(err, io.EOF) {
		return File{}, fmt.Errorf("policy file: %w", err)
	}
	return pf, nil
}

// Decode reads the policies: and limits: sections of another YAML file
// (idem gateway --config, SPEC §17.1) as Parse reads a policy file; a nil
// node is an absent section.
func Decode(policies, limits *yaml.Node) (File, error) {
	var pf File
	if policies != nil {
		if err := policies.Load(&pf.Policies, yaml.WithKnownFields()); err != nil {
			return File{}, fmt.Errorf("policies: %w", err)
		}
	}
	if limits != nil {
		if err := limits.Load(&pf.Limits, yaml.WithKnownFields()); err != nil {
			return File{}, fmt.Errorf("limits: %w", err)
		}
	}
	return pf, nil
}

// Empty reports whether f has no rule and no limit.
func (f File) Empty() bool { return len(f.Policies) == 0 && len(f.Limits) == 0 }

// selector is the operations a rule or a limit applies to.
type selector struct {
	operations  []string
	sideEffects []string
}

func (s selector) matches(m idem.Metadata) bool {
	if len(s.sideEffects) > 0 && !slices.Contains(s.sideEffects, string(m.SideEffect)) {
		return false
	}
	if len(s.operations) == 0 {
		return true
	}
	for _, p := range s.operations {
		if ok, _ := path.Match(p, m.Name); ok {
			return true
		}
	}
	return false
}

// isGlob reports whether p is a pattern rather than a name.
func isGlob(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// check reports a selector that names an operation the catalog lacks, a
// malformed glob or an unknown side effect.
func (s selector) check(known map[string]bool) error {
	for _, p := range s.operations {
		if !isGlob(p) {
			if !known[p] {
				return fmt.Errorf("operations: no operation named %q", p)
			}
			continue
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("operations: %q is not a valid glob: %v", p, err)
		}
	}
	for _, se := range s.sideEffects {
		switch idem.SideEffect(se) {
		case idem.SideEffectNone, idem.SideEffectRead, idem.SideEffectWrite, idem.SideEffectDestructive, idem.SideEffectExternal:
		default:
			return fmt.Errorf("sideEffects: %q is not one of none, read, write, destructive, external", se)
		}
	}
	return nil
}
