package idem

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Registry holds the declared operations, checked against every
// registration rule of SPEC §3. NewRegistry is the only way to make one, so
// a Registry is always valid.
type Registry struct {
	ops    map[string]*Compiled
	sorted []string
}

// Descriptor is what surfaces publish about an operation: the catalog
// entry, the OpenAPI operation and the MCP tool are built from it.
type Descriptor struct {
	Metadata
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Params are the flat arguments in declaration order.
	Params []Param
	// Raw marks a raw operation (DefineRaw): its surface passes the
	// request's headers and body as they are, and its answers are the
	// handler's own.
	Raw bool
	// MCPTool is RawSpec.MCPTool, nil for none.
	MCPTool json.RawMessage
}

// reservedArguments are argument names the surfaces add themselves.
var reservedArguments = []string{"idempotencyKey", "dryRun"}

// NewRegistry checks and registers ops. It rejects, with an error naming
// the operation and the rule: invalid metadata (Metadata.Validate: runtime
// retry on a writing operation without idempotent: true, a contract kind
// that contradicts the side effect, …); preview: true without a preview
// handler; a reconcile that names no registered read operation; two
// operations with one name or one method and path; route parameters that
// do not match the input's path fields; argument names that collide.
func NewRegistry(ops ...Operation) (*Registry, error) {
	r := &Registry{ops: map[string]*Compiled{}}
	routes := map[string]string{}
	var errs []error
	for _, op := range ops {
		c, err := op.compile()
		switch {
		case err == nil && c.raw != nil:
			err = c.meta.validateContract() // compile checked the raw name rule
		case err == nil:
			err = c.meta.Validate()
		}
		if err == nil {
			err = checkOperation(c)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name := c.meta.Name
		if _, dup := r.ops[name]; dup {
			errs = append(errs, fmt.Errorf("operation %q: declared twice", name))
			continue
		}
		route := c.meta.Method + " " + RouteShape(c.meta.Path)
		if other, dup := routes[route]; dup {
			errs = append(errs, fmt.Errorf("operation %q: route %s %s is already operation %q's", name, c.meta.Method, c.meta.Path, other))
			continue
		}
		routes[route] = name
		r.ops[name] = c
		r.sorted = append(r.sorted, name)
	}
	for _, name := range r.sorted {
		c := r.ops[name]
		if rec := c.meta.Retry.Reconcile; rec != "" {
			target, ok := r.ops[rec]
			if !ok {
				errs = append(errs, fmt.Errorf("operation %q: reconcile names %q, which is not a registered operation", name, rec))
			} else if target.meta.SideEffect.Writes() || target.meta.Retry.Kind != RetryFreshRead {
				errs = append(errs, fmt.Errorf("operation %q: reconcile names %q, which is not a read operation (fresh_read)", name, rec))
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("idem: %w", errors.Join(errs...))
	}
	sort.Strings(r.sorted)
	return r, nil
}

// checkOperation checks the rules that need the compiled operation.
func checkOperation(c *Compiled) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("operation %q: %s", c.meta.Name, fmt.Sprintf(format, args...))
	}
	if c.meta.Retry.Preview && c.preview == nil {
		return fail("retry.preview is true but no preview handler is declared (WithPreview)")
	}
	seen := map[string]string{}
	pathFields := map[string]bool{}
	for _, p := range c.params {
		for _, reserved := range reservedArguments {
			// dryRun is the surfaces' own in the query, and on MCP where
			// the operation has a preview: a body member of that name is
			// a raw operation's own elsewhere (an idem gateway tool's,
			// whose arguments are an upstream's). A Go type renames it.
			if p.Name == reserved && !(p.Name == "dryRun" && c.raw != nil && p.In == "body" && !c.meta.Retry.Preview) {
				return fail("argument %q is reserved for the surfaces; rename the field", p.Name)
			}
		}
		if prev, dup := seen[p.Name]; dup {
			return fail("argument %q is declared twice (%s and %s)", p.Name, prev, p.In)
		}
		seen[p.Name] = p.In
		if p.In == "path" {
			pathFields[p.Name] = true
		}
	}
	for _, name := range PathParamNames(c.meta.Path) {
		if !pathFields[name] {
			return fail("route %s has {%s} but the input has no field %q tagged in:\"path\"", c.meta.Path, name, name)
		}
		delete(pathFields, name)
	}
	for name := range pathFields {
		return fail("input field %q is tagged in:\"path\" but route %s has no {%s}", name, c.meta.Path, name)
	}
	if !routeWellFormed(c.meta.Path) {
		return fail("route %s has a malformed {parameter}", c.meta.Path)
	}
	return nil
}

// Names returns the operation names, sorted.
func (r *Registry) Names() []string { return append([]string(nil), r.sorted...) }

// Describe returns the descriptor of an operation.
// Lookup returns a registered operation as the engine runs it.
func (r *Registry) Lookup(name string) (*Compiled, bool) {
	c, ok := r.ops[name]
	return c, ok
}

func (r *Registry) Describe(name string) (Descriptor, bool) {
	c, ok := r.ops[name]
	if !ok {
		return Descriptor{}, false
	}
	return c.descriptor(), true
}

func (c *Compiled) descriptor() Descriptor {
	d := Descriptor{Metadata: c.meta, InputSchema: c.input.JSON(), OutputSchema: c.output.JSON(),
		Params: append([]Param(nil), c.params...), Raw: c.raw != nil}
	if c.raw != nil {
		d.MCPTool = c.raw.MCPTool
	}
	return d
}

// Descriptors returns every operation's descriptor, sorted by name.
func (r *Registry) Descriptors() []Descriptor {
	out := make([]Descriptor, 0, len(r.sorted))
	for _, name := range r.sorted {
		d, _ := r.Describe(name)
		out = append(out, d)
	}
	return out
}

// LongestLease returns the operation with the longest lease under grace
// (Metadata.Lease) and that lease; "" and 0 for an empty registry.
func (r *Registry) LongestLease(grace time.Duration) (name string, lease time.Duration) {
	for _, n := range r.sorted {
		if l := r.ops[n].meta.Lease(grace); l > lease {
			name, lease = n, l
		}
	}
	return name, lease
}
