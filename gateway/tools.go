package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/schema"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/proxy"
)

// ToolPathPrefix is where each tool's HTTP route lives: POST
// /tools/{tool name}, with the arguments as the JSON body.
const ToolPathPrefix = "/tools/"

// Built is what Build declares.
type Built struct {
	// Operations are one raw operation per served tool, in name order.
	Operations []idem.Operation
	// Warnings are for the start-up log: tools without a declared
	// contract, tools left out, overlay entries for no tool.
	Warnings []string
}

// Options are the choices Build takes beyond the tools and overlay.
type Options struct {
	// Timeout is the operations' default timeout (an upstream's
	// timeouts.call, SPEC §17.1); an overlay entry's timeoutMs wins for
	// its tool. 0 means idem.DefaultTimeout.
	Timeout time.Duration
	// ConfigUpstream names the config upstream (SPEC §17.1) whose
	// contracts: file the warnings send the operator to; empty for the
	// one-upstream flags' --contracts.
	ConfigUpstream string
}

// toolName is the rule of tool names the gateway can serve (the MCP
// specification's recommended characters; an idem raw operation's name).
var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Build declares one raw operation per upstream tool (SPEC §17), named as
// the tool, at POST /tools/{name}, its contract from overlay (keyed by
// tool name) or else from the tool's annotations, each call forwarded to
// up. A tool the gateway cannot serve (a name outside [A-Za-z0-9_.-], an
// input schema that is not an object, an argument named idempotencyKey)
// is left out with a warning, as is an overlay entry that
// names no tool: the upstream's list is live, and one odd tool must not
// take the others down.
func Build(tools []*mcp.Tool, overlay proxy.Overlay, up Caller, opts Options) (*Built, error) {
	if up == nil {
		return nil, errors.New("gateway: Build needs the upstream to call")
	}
	out := &Built{}
	byName := map[string]*mcp.Tool{}
	for _, t := range tools {
		if t == nil {
			continue
		}
		if _, dup := byName[t.Name]; dup {
			out.Warnings = append(out.Warnings, fmt.Sprintf("the upstream lists tool %q twice; the first is served", t.Name))
			continue
		}
		byName[t.Name] = t
	}
	var undeclared, noReconcile []string
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		t := byName[name]
		op, note, dropped, err := declare(t, overlay, up, opts.Timeout)
		if err != nil {
			out.Warnings = append(out.Warnings, fmt.Sprintf("tool %q is not served: %v", name, err))
			continue
		}
		for _, d := range dropped {
			out.Warnings = append(out.Warnings, fmt.Sprintf("tool %q: the enum at %s has %d values, more than %d: idem does not check it, and the served tool, catalog entry and validated schema leave it out (the upstream still checks it)",
				name, d.at, d.values, proxy.MaxEnum))
		}
		switch note {
		case noteUndeclared:
			undeclared = append(undeclared, name)
		case noteNoReconcile:
			noReconcile = append(noReconcile, name)
		}
		out.Operations = append(out.Operations, op)
	}
	for _, name := range slices.Sorted(maps.Keys(overlay)) {
		if _, ok := byName[name]; !ok {
			out.Warnings = append(out.Warnings, fmt.Sprintf("the contracts overlay declares %q, which is no tool of the upstream (now)", name))
		}
	}
	if len(undeclared) > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d writing tools have no declared retry contract and are no_automatic_retry (keys refused, nothing replayed): %s; declare one in %s",
			len(undeclared), strings.Join(undeclared, ", "), proxy.ContractsPlace(opts.ConfigUpstream)))
	}
	if len(noReconcile) > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d tools say idempotentHint but name no reconcile read tool, so they are no_automatic_retry rather than convergent: %s; give each a reconcile in %s",
			len(noReconcile), strings.Join(noReconcile, ", "), proxy.ContractsPlace(opts.ConfigUpstream)))
	}
	// Reconcile names that are not (served) reads are caught by the
	// registry with the tool's name; a tool left out above takes its
	// dependents with it there, which is a start-up error worth seeing.
	return out, nil
}

type note int

const (
	noteNone note = iota
	noteUndeclared
	noteNoReconcile
)

// kindOf is the retry kind a tool gets: the overlay's, else the one its
// annotations suggest.
func kindOf(t *mcp.Tool, overlay proxy.Overlay) idem.RetryKind {
	if e, ok := overlay[t.Name]; ok && e.Kind != "" {
		return e.Kind
	}
	a := t.Annotations
	switch {
	case a != nil && a.ReadOnlyHint:
		return idem.RetryFreshRead
	case a != nil && a.IdempotentHint:
		return idem.RetryConvergent
	}
	return idem.RetryNoAutomaticRetry
}

// undeclaredRationale is the rationale of a writing tool without a
// declared contract.
const undeclaredRationale = "No retry contract is declared for this tool (no overlay entry, no readOnlyHint or idempotentHint): never retry it automatically; after an ambiguous result, check the current state and decide."

// declare builds one tool's operation; dropped are the enums left out of
// its input schema.
func declare(t *mcp.Tool, overlay proxy.Overlay, up Caller, timeout time.Duration) (_ idem.Operation, _ note, dropped []droppedEnum, _ error) {
	if !toolName.MatchString(t.Name) {
		return nil, noteNone, nil, errors.New("its name is not 1 to 128 letters, digits, '_', '.' or '-'")
	}
	if t.Name == "." || t.Name == ".." {
		// POST /tools/. and /tools/.. are paths the router cleans and
		// redirects elsewhere: such a tool could not be called.
		return nil, noteNone, nil, fmt.Errorf("its name %q is a path segment HTTP cannot route (/tools/%s)", t.Name, t.Name)
	}
	input, params, dropped, err := inputOf(t)
	if err != nil {
		return nil, noteNone, nil, err
	}
	entry, inOverlay := overlay[t.Name]
	a := t.Annotations
	if a == nil {
		a = &mcp.ToolAnnotations{}
	}
	meta := idem.Metadata{Name: t.Name, Method: "POST", Path: ToolPathPrefix + t.Name, Summary: summaryOf(t)}
	// The side effect, from the hints unless the overlay says.
	switch {
	case a.ReadOnlyHint:
		meta.SideEffect = idem.SideEffectRead
	case a.DestructiveHint != nil && *a.DestructiveHint:
		meta.SideEffect = idem.SideEffectDestructive
	default:
		meta.SideEffect = idem.SideEffectWrite
	}
	kind := kindOf(t, overlay)
	if inOverlay && entry.Kind != "" && entry.SideEffect == "" {
		// The overlay's kind outweighs the hints: a declared read reads, a
		// tool declared to replay by key (or converge…) writes.
		if kind == idem.RetryFreshRead {
			meta.SideEffect = idem.SideEffectRead
		} else if !meta.SideEffect.Writes() {
			meta.SideEffect = idem.SideEffectWrite
		}
	}
	if inOverlay && entry.SideEffect != "" {
		meta.SideEffect = entry.SideEffect
	}
	n := noteNone
	switch {
	case inOverlay && entry.Kind != "":
		meta.Retry = idem.RetryContract{Kind: entry.Kind, Reconcile: entry.Reconcile, Rationale: entry.Rationale, Preview: entry.Preview}
	case kind == idem.RetryFreshRead:
		meta.Retry = idem.RetryContract{Kind: kind, Rationale: "The upstream marks this tool readOnlyHint: it always runs and is never cached."}
	case kind == idem.RetryConvergent && entry.Reconcile != "":
		meta.Retry = idem.RetryContract{Kind: kind, Reconcile: entry.Reconcile,
			Rationale: orDefault(entry.Rationale, "The upstream marks this tool idempotentHint: repeating it with the same arguments has no further effect.")}
	case kind == idem.RetryConvergent:
		meta.Retry = idem.RetryContract{Kind: idem.RetryNoAutomaticRetry,
			Rationale: "The upstream marks this tool idempotentHint, but no reconcile read tool is declared for it: never retry it automatically; after an ambiguous result, check the current state and decide."}
		n = noteNoReconcile
	default:
		meta.Retry = idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: orDefault(entry.Rationale, undeclaredRationale)}
		if meta.SideEffect.Writes() && !inOverlay {
			n = noteUndeclared
		}
	}
	meta.Timeout = timeout
	if inOverlay {
		if entry.TimeoutMs != 0 { // a negative one is refused by the registry
			meta.Timeout = time.Duration(entry.TimeoutMs) * time.Millisecond
		}
		meta.Approval = entry.Approval
	}
	if meta.Retry.Preview {
		return nil, noteNone, nil, errors.New("the overlay asks for preview, which an MCP tool call cannot carry (there is no dry run of tools/call)")
	}
	served, err := json.Marshal(t)
	if err != nil {
		return nil, noteNone, nil, fmt.Errorf("the tool's declaration: %w", err)
	}
	spec := idem.RawSpec{Params: params, InputSchema: input, ArgumentsBody: true, MCPTool: served, Handler: forward(up, t.Name, meta.SideEffect.Writes())}
	if tg, ok := up.(interface{ Target() string }); ok {
		spec.Target = tg.Target()
	}
	return idem.DefineRaw(meta, spec), n, dropped, nil
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) != "" {
		return s
	}
	return def
}

// summaryOf is the tool's description, else its title, else its name.
func summaryOf(t *mcp.Tool) string {
	for _, s := range []string{t.Description, t.Title} {
		if s = strings.TrimSpace(s); s != "" {
			return s
		}
	}
	if t.Annotations != nil && strings.TrimSpace(t.Annotations.Title) != "" {
		return strings.TrimSpace(t.Annotations.Title)
	}
	return "The upstream tool " + t.Name + "."
}

// inputOf is the tool's input schema as the operation's (every argument a
// body member) and its flat arguments. A schema the validator cannot
// compile is refused: the gateway validates every call before it is
// stored.
func inputOf(t *mcp.Tool) (json.RawMessage, []idem.Param, []droppedEnum, error) {
	var dropped []droppedEnum
	schemaValue := dropEnums(t.InputSchema, "#", &dropped)
	raw, err := json.Marshal(schemaValue)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("input schema: %w", err)
	}
	if len(dropped) > 0 {
		t.InputSchema = schemaValue // what is served leaves them out too
	}
	if string(raw) == "null" {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	var s struct {
		Type       any                        `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, nil, nil, fmt.Errorf("input schema is not a JSON object: %w", err)
	}
	if s.Type != "object" {
		return nil, nil, nil, fmt.Errorf(`input schema: "type" is %v, not "object"`, s.Type)
	}
	var params []idem.Param
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		// dryRun is an ordinary argument here: no gateway tool offers a
		// preview (SPEC §17 rulings).
		if name == mcpserver.ArgIdempotencyKey {
			return nil, nil, nil, fmt.Errorf("its argument %q is idem's own (the MCP surface reserves it)", name)
		}
		params = append(params, idem.Param{Name: name, In: "body"})
	}
	if _, err := schema.Compile(raw); err != nil {
		return nil, nil, nil, fmt.Errorf("input schema: %w", err)
	}
	return raw, params, dropped, nil
}

// droppedEnum is an enum of more than proxy.MaxEnum values left out of a
// tool's input schema (as idem proxy leaves them out of an operation's):
// at is its JSON pointer in the schema.
type droppedEnum struct {
	at     string
	values int
}

// dropEnums returns v, a decoded JSON schema, without its enums of more
// than proxy.MaxEnum values (a copy of what it edits; v itself when it
// has none), adding each to dropped.
func dropEnums(v any, at string, dropped *[]droppedEnum) any {
	if !hasBigEnum(v) {
		return v
	}
	out, _ := dropEnumsIn(v, at, dropped)
	return out
}

func hasBigEnum(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if l, ok := child.([]any); ok && k == "enum" && len(l) > proxy.MaxEnum || hasBigEnum(child) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, hasBigEnum)
	}
	return false
}

func dropEnumsIn(v any, at string, dropped *[]droppedEnum) (any, bool) {
	changed := false
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, child := range v {
			path := at + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
			if l, ok := child.([]any); ok && k == "enum" && len(l) > proxy.MaxEnum {
				*dropped = append(*dropped, droppedEnum{at: path, values: len(l)})
				changed = true
				continue
			}
			c, ch := dropEnumsIn(child, path, dropped)
			out[k], changed = c, changed || ch
		}
		if changed {
			return out, true
		}
	case []any:
		out := make([]any, len(v))
		for i, child := range v {
			c, ch := dropEnumsIn(child, fmt.Sprintf("%s/%d", at, i), dropped)
			out[i], changed = c, changed || ch
		}
		if changed {
			return out, true
		}
	}
	return v, false
}
