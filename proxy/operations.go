package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
)

// Options shape the operations Build makes.
type Options struct {
	// Forward is the handler of every operation (Forwarder.Handler).
	Forward func(op Operation) idem.RawHandler
	// Unvalidated turns input validation off (--validate=false).
	Unvalidated bool
	// ServerURL is the served document's servers[0].url: where the proxy
	// serves the operations ("/" when empty).
	ServerURL string
	// Upstream is the API the operations forward to. Its origin and path
	// are part of every call's fingerprint (idem.RawSpec.Target), so that
	// proxies of different upstreams sharing one store never answer each
	// other's keys; proxies of one upstream share them.
	Upstream *url.URL
	// Prefix, when set, serves the operations of several upstreams side
	// by side (idem gateway --config, SPEC §17.1): each operation is named
	// Prefix+"."+operationId, its route is "/"+Prefix+path (the upstream
	// still receives path), and reconcile names are prefixed alike. The
	// overlay stays keyed by operationId. Built.Document is then nil: the
	// gateway serves one document for all its upstreams.
	Prefix string
	// Timeout is the operations' default timeout (an upstream's
	// timeouts.call, SPEC §17.1); an overlay entry's timeoutMs wins for
	// its operation. 0 means idem.DefaultTimeout.
	Timeout time.Duration
	// ConfigUpstream names the config upstream whose contracts: file the
	// warnings send the operator to; empty for --contracts.
	ConfigUpstream string
}

// ContractsPlace is where Build's and gateway.Build's start-up warnings
// tell the operator to declare a contract: the contracts: file of the
// config upstream named, or the --contracts file of the one-upstream
// flags when upstream is empty.
func ContractsPlace(upstream string) string {
	if upstream == "" {
		return "--contracts"
	}
	return fmt.Sprintf("the contracts: file of upstream %q", upstream)
}

// Operation is what Build knows about one proxied operation.
type Operation struct {
	Name   string
	Method string
	Path   string
	// Writes is whether the operation has effects (its side effect is not
	// none or read): the upstream then receives the handler key.
	Writes bool
	// Contract says where the retry contract came from: "extension",
	// "overlay" or "method".
	Contract string
	// FreshRead is whether the contract is fresh_read and the operation
	// does not write: the only calls the upstream client may re-send by
	// itself (when unkeyed); every other is held to one send (forward).
	FreshRead bool
}

// Built is what Build returns.
type Built struct {
	Operations []idem.Operation
	Proxied    []Operation
	// Warnings are for the start-up log: writing operations without a
	// declared contract, operations whose input is not validated.
	Warnings []string
	// Document is the OpenAPI document served at /openapi.json: the
	// upstream's, describing the proxy (httpapi.OpenAPIOver): every
	// operation with its x-idem-agent-retry, the control inputs of its
	// contract, the problems and headers idem answers; idem's security,
	// servers, system routes and components.
	Document []byte
}

// Build declares one raw operation per operation of doc (SPEC §15). It
// refuses, naming method and path or the operationId: an operation
// without an operationId, a path segment that mixes text and a
// parameter, an overlay entry for no operation, and everything idem's
// registration refuses (which NewRegistry reports).
func Build(doc *Document, overlay Overlay, opts Options) (*Built, error) {
	out := &Built{}
	var errs []error
	seen := map[string]bool{}
	if opts.Forward == nil {
		return nil, errors.New("proxy: Options.Forward is required")
	}
	if n := countOperations(doc); n > MaxOperations {
		return nil, fmt.Errorf("the document declares %d operations, more than %d, the most idem proxy serves (each holds its schemas, validator, catalog entry and MCP tool in memory): serve the API through several proxies, each with a document of a part of its operations", n, MaxOperations)
	}
	components, err := componentsOf(doc)
	if err != nil {
		return nil, err
	}
	requests, answers := newConverter(doc, components, true), newConverter(doc, components, false)
	var descs []idem.Descriptor
	var cost documentCost
	dropped := map[string][]string{} // the operations that left out each enum, by where and how long
	var undeclared []string
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		methods := item.Operations()
		for _, method := range slices.Sorted(maps.Keys(methods)) {
			op := methods[method]
			where := method + " " + path
			if op.OperationID == "" {
				errs = append(errs, fmt.Errorf("%s has no operationId: give every operation one (it names the operation, its MCP tool and its catalog entry)", where))
				continue
			}
			if seg := idem.MixedRouteSegment(path); seg != "" {
				errs = append(errs, fmt.Errorf("operation %q (%s): path segment %q mixes text and a parameter; idem proxy routes whole-segment parameters only", op.OperationID, where, seg))
			}
			seen[op.OperationID] = true
			def, warn, err := declare(requests, answers, method, path, item, op, overlay, opts)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if err := cost.add(op.OperationID, def.descriptor); err != nil {
				return nil, err
			}
			for _, d := range def.dropped {
				k := d.String()
				dropped[k] = append(dropped[k], op.OperationID)
			}
			if warn != "" {
				out.Warnings = append(out.Warnings, warn)
			}
			if def.proxied.Contract == string(fromMethod) && def.proxied.Writes {
				undeclared = append(undeclared, def.proxied.Name) // the served name, prefix and all
			}
			out.Operations = append(out.Operations, def.op)
			out.Proxied = append(out.Proxied, def.proxied)
			descs = append(descs, def.descriptor)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(overlay)) {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("the contracts overlay declares %q, which is no operationId of the document", name))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out.Warnings = append(out.Warnings, droppedWarnings(dropped)...)
	if len(undeclared) > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d writing operations have no declared retry contract and are no_automatic_retry (keys refused, nothing replayed): %s; declare one with x-idem-agent-retry or in %s",
			len(undeclared), namedList(undeclared), ContractsPlace(opts.ConfigUpstream)))
	}
	if opts.Prefix != "" {
		return out, nil
	}
	// The document describes the proxy (httpapi.OpenAPIOver): clients
	// reach the operations through it, not at the upstream.
	base, err := json.Marshal(doc.T)
	if err == nil {
		out.Document, err = httpapi.OpenAPIOver(base, descs, httpapi.OpenAPIInfo{ServerURL: opts.ServerURL})
	}
	if err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	return out, nil
}

type declared struct {
	op      idem.Operation
	proxied Operation
	// descriptor is what the served document reads of the operation.
	descriptor idem.Descriptor
	// dropped are the enums longer than MaxEnum left out of its schemas.
	dropped []droppedEnumIn
}

// declare builds one operation.
func declare(in, out *converter, method, path string, item *openapi3.PathItem, op *openapi3.Operation, overlay Overlay, opts Options) (declared, string, error) {
	name := op.OperationID
	fail := func(format string, args ...any) error {
		return fmt.Errorf("operation %q (%s %s): %s", name, method, path, fmt.Sprintf(format, args...))
	}
	meta := idem.Metadata{Name: name, Method: method, Path: path, Summary: summaryOf(op, method, path)}
	entry, inOverlay := overlay[name]
	source := fromMethod
	if raw, ok := op.Extensions[httpapi.AgentRetryExtension]; ok {
		c, err := parseExtension(raw)
		if err != nil {
			return declared{}, "", fail("x-idem-agent-retry: %v", err)
		}
		meta.Retry, source = c, fromExtension
	} else if inOverlay {
		meta.Retry = idem.RetryContract{Kind: entry.Kind, Reconcile: entry.Reconcile, Rationale: entry.Rationale, Preview: entry.Preview}
		source = fromOverlay
	}
	meta.SideEffect = sideEffectOf(method)
	if source == fromExtension && meta.Retry.Kind == idem.RetryFreshRead {
		meta.SideEffect = idem.SideEffectRead // a declared read (POST /search) reads
	}
	if inOverlay && entry.SideEffect != "" {
		meta.SideEffect = entry.SideEffect
	}
	if source == fromMethod {
		meta.Retry = idem.RetryContract{Kind: idem.RetryFreshRead, Rationale: "A read: it always runs and is never cached."}
		if meta.SideEffect.Writes() {
			meta.Retry = idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: undeclaredRationale}
		}
	}
	meta.Timeout = opts.Timeout
	if inOverlay {
		if entry.TimeoutMs != 0 { // a negative one is refused by the registry
			meta.Timeout = time.Duration(entry.TimeoutMs) * time.Millisecond
		}
		meta.Approval = entry.Approval
	}
	in.take()
	params, schema, validate, why, err := inputOf(in, path, item, op)
	if err != nil {
		return declared{}, "", fail("%v", err)
	}
	var dropped []droppedEnumIn
	for _, d := range in.take() {
		dropped = append(dropped, droppedEnumIn{droppedEnum: d, schema: "input"})
	}
	out.take()
	output := outputOf(out, op)
	for _, d := range out.take() {
		dropped = append(dropped, droppedEnumIn{droppedEnum: d, schema: "answer"})
	}
	warn := ""
	if !validate && !opts.Unvalidated {
		warn = fmt.Sprintf("operation %q: input is forwarded without validation: %s", name, why)
	}
	p := Operation{Name: name, Method: method, Path: path, Writes: meta.SideEffect.Writes(), Contract: string(source),
		FreshRead: meta.Retry.Kind == idem.RetryFreshRead && !meta.SideEffect.Writes()}
	handler := opts.Forward(p)
	if opts.Prefix != "" {
		meta.Name, meta.Path, p.Name = opts.Prefix+"."+name, "/"+opts.Prefix+path, opts.Prefix+"."+name
		if meta.Retry.Reconcile != "" {
			meta.Retry.Reconcile = opts.Prefix + "." + meta.Retry.Reconcile
		}
		handler = unprefixed("/"+opts.Prefix, handler)
	}
	spec := idem.RawSpec{Params: params, InputSchema: schema, OutputSchema: output,
		Unvalidated: opts.Unvalidated || !validate, Target: idem.TargetOf(opts.Upstream), Handler: handler}
	d := idem.Descriptor{Metadata: meta.WithDefaults(), InputSchema: spec.InputSchema, OutputSchema: spec.OutputSchema,
		Params: spec.Params, Raw: true}
	return declared{op: idem.DefineRaw(meta, spec), proxied: p, descriptor: d, dropped: dropped}, warn, nil
}

// unprefixed forwards a call served under prefix to the upstream's own
// path.
func unprefixed(prefix string, next idem.RawHandler) idem.RawHandler {
	return func(ctx context.Context, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
		req.Path = strings.TrimPrefix(req.Path, prefix)
		return next(ctx, call, req)
	}
}

// summaryOf is the operation's summary, else the first line of its
// description, else its route.
func summaryOf(op *openapi3.Operation, method, path string) string {
	if s := strings.TrimSpace(op.Summary); s != "" {
		return s
	}
	if d, _, _ := strings.Cut(strings.TrimSpace(op.Description), "\n"); d != "" {
		return d
	}
	return method + " " + path
}

// inputOf is the operation's flat arguments and their schema: path, query
// and header parameters, then the properties of a JSON object body. validate
// is false (with why) when the request cannot be checked that way: a body
// that is not a JSON object, a query parameter that takes several values.
func inputOf(c *converter, path string, item *openapi3.PathItem, op *openapi3.Operation) (params []idem.Param, schema json.RawMessage, validate bool, why string, err error) {
	props := map[string]any{}
	var required []string
	validate = true
	byName := map[string]string{}
	add := func(name, in string, s any) error {
		if prev, dup := byName[name]; dup {
			return fmt.Errorf("argument %q is both a %s and a %s argument: the flat arguments (MCP, the catalog) need distinct names", name, prev, in)
		}
		if name == "idempotencyKey" || name == "dryRun" {
			return fmt.Errorf("argument %q is reserved for idem's own arguments", name)
		}
		byName[name] = in
		props[name] = s
		return nil
	}
	for _, ref := range mergedParameters(item, op) {
		p := ref.Value
		if p == nil || (p.In != "path" && p.In != "query" && p.In != "header") {
			continue // cookies are forwarded as they are
		}
		if p.In == "header" && idem.ReservedHeader(p.Name) {
			// Accept, Content-Type and Authorization, which OpenAPI says
			// to ignore as parameters, and the headers idem or HTTP owns
			// (Idempotency-Key, Prefer, …): forwarded or dropped as the
			// Forwarder says, never inputs.
			continue
		}
		var s any = map[string]any{}
		typ := "string"
		if p.Schema != nil {
			if s, err = c.of(p.Schema, "/properties/"+pointerToken(p.Name)); err != nil {
				return nil, nil, false, "", err
			}
			if v := p.Schema.Value; v != nil && v.Type != nil {
				for _, t := range []string{"integer", "number", "boolean", "array", "object"} {
					if v.Type.Is(t) || v.Type.Includes(t) {
						typ = t
						break
					}
				}
			}
		}
		if typ == "array" || typ == "object" {
			validate, why = false, fmt.Sprintf("%s parameter %q takes a list or an object", p.In, p.Name)
			typ = "string"
		}
		if err := add(p.Name, p.In, s); err != nil {
			return nil, nil, false, "", err
		}
		param := idem.Param{Name: p.Name, In: p.In, Type: typ}
		if p.In == "header" {
			param.Header = p.Name // a declared header input (docs/operations.md)
		}
		params = append(params, param)
		if p.Required || p.In == "path" {
			required = append(required, p.Name)
		}
	}
	// A route parameter the document does not declare is a string.
	for _, name := range idem.PathParamNames(path) {
		if _, declared := byName[name]; !declared {
			if err := add(name, "path", map[string]any{"type": "string"}); err != nil {
				return nil, nil, false, "", err
			}
			params = append(params, idem.Param{Name: name, In: "path", Type: "string"})
			required = append(required, name)
		}
	}
	root := map[string]any{"type": "object"}
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		// No body declared: the parameters are all there is, so an
		// unknown argument is refused on every surface (over HTTP an
		// unknown query parameter is; over MCP it would go as a body).
		root["additionalProperties"] = false
	}
	if body := op.RequestBody; body != nil && body.Value != nil {
		mt, media := jsonMedia(body.Value.Content)
		switch {
		case media == nil:
			validate, why = false, "its body is not JSON"
		case media.Schema == nil || media.Schema.Value == nil || !isObject(media.Schema.Value):
			validate, why = false, fmt.Sprintf("its %s body is not declared as a JSON object", mt)
		default:
			v := media.Schema.Value
			for _, prop := range slices.Sorted(maps.Keys(v.Properties)) {
				s, err := c.of(v.Properties[prop], "/properties/"+pointerToken(prop))
				if err != nil {
					return nil, nil, false, "", err
				}
				if err := add(prop, "body", s); err != nil {
					return nil, nil, false, "", err
				}
				params = append(params, idem.Param{Name: prop, In: "body"})
			}
			if body.Value.Required {
				for _, name := range v.Required {
					if p := v.Properties[name]; p == nil || p.Value == nil || !p.Value.ReadOnly {
						required = append(required, name) // readOnly: never sent in a request
					}
				}
			}
			if v.AdditionalProperties.Has != nil && !*v.AdditionalProperties.Has {
				root["additionalProperties"] = false
			} else if v.AdditionalProperties.Schema != nil {
				s, err := c.of(v.AdditionalProperties.Schema, "/additionalProperties")
				if err != nil {
					return nil, nil, false, "", err
				}
				root["additionalProperties"] = s
			}
		}
	}
	root["properties"] = props
	if len(required) > 0 {
		root["required"] = required
	}
	if defs := c.defsFor(root); len(defs) > 0 {
		root["$defs"] = defs
	}
	schema, err = json.Marshal(root)
	return params, schema, validate, why, err
}

// outputOf is the JSON schema of the first 2xx JSON answer, or nil.
func outputOf(c *converter, op *openapi3.Operation) json.RawMessage {
	if op.Responses == nil {
		return nil
	}
	for _, code := range slices.Sorted(maps.Keys(op.Responses.Map())) {
		r := op.Responses.Value(code)
		if !strings.HasPrefix(code, "2") || r == nil || r.Value == nil {
			continue
		}
		if _, media := jsonMedia(r.Value.Content); media != nil && media.Schema != nil {
			s, err := c.of(media.Schema, "")
			if err != nil {
				return nil
			}
			if m, ok := s.(map[string]any); ok {
				if defs := c.defsFor(m); len(defs) > 0 {
					m["$defs"] = defs
				}
			}
			b, _ := json.Marshal(s)
			return b
		}
	}
	return nil
}

// mergedParameters are the path item's parameters overridden by the
// operation's, by (in, name).
func mergedParameters(item *openapi3.PathItem, op *openapi3.Operation) openapi3.Parameters {
	var out openapi3.Parameters
	index := map[string]int{}
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range list {
			if ref == nil || ref.Value == nil {
				continue
			}
			k := ref.Value.In + "\x00" + ref.Value.Name
			if i, ok := index[k]; ok {
				out[i] = ref
				continue
			}
			index[k] = len(out)
			out = append(out, ref)
		}
	}
	return out
}

// jsonMedia picks the JSON media type of content (application/json, or
// a +json type), if any.
func jsonMedia(content openapi3.Content) (string, *openapi3.MediaType) {
	for _, mt := range slices.Sorted(maps.Keys(content)) {
		base, _, err := mime.ParseMediaType(mt)
		if err != nil {
			base = mt
		}
		if base == "application/json" || strings.HasSuffix(base, "+json") {
			return mt, content[mt]
		}
	}
	return "", nil
}

func isObject(s *openapi3.Schema) bool {
	return s.Type != nil && s.Type.Is("object") || s.Type == nil && len(s.Properties) > 0
}

// droppedEnumIn is an enum left out of an operation's input or answer
// schema.
type droppedEnumIn struct {
	droppedEnum
	schema string // "input" or "answer"
}

// String says where the enum was, for grouping the operations that had it.
func (d droppedEnumIn) String() string {
	return fmt.Sprintf("%s schema at %s (%d values)", d.schema, d.at, d.values)
}

// maxNamed is the most operations a start-up warning names; it counts
// the rest, so that a warning does not grow with the document.
const maxNamed = 50

// namedList joins names, at most maxNamed of them, and counts the rest.
func namedList(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}

// droppedWarnings are the start-up warnings of the enums left out: one
// for each place, naming the operations whose schema had it.
func droppedWarnings(dropped map[string][]string) []string {
	var out []string
	for _, where := range slices.Sorted(maps.Keys(dropped)) {
		ops := dropped[where]
		named := "operation " + ops[0]
		if len(ops) > 1 {
			named = "operations " + namedList(ops)
		}
		out = append(out, fmt.Sprintf("%s: the enum of the %s has more than %d values: idem does not check it, and its catalog entry, MCP tool and validated schema leave it out (the upstream still checks it; the served OpenAPI document keeps it)",
			named, where, MaxEnum))
	}
	return out
}

// The bounds of a document's cost (docs/proxy.md): every operation holds
// its input and answer schemas (each with the component schemas it
// reaches), its validator, its catalog entry and its MCP tool for as long
// as the proxy runs, so that memory follows the operations and the size
// of their schemas, not the document's bytes (a large component reached
// by every operation is copied into each).
const (
	// MaxOperations is the most operations a document may declare.
	MaxOperations = 5000
	// MaxSchemaBytes bounds the sum of the operations' input and answer
	// schemas, as JSON.
	MaxSchemaBytes = 32 << 20
)

// documentCost adds up what the operations declared so far cost.
type documentCost struct {
	operations   int
	schemaBytes  int
	largest      string
	largestBytes int
}

// countOperations counts doc's operations.
func countOperations(doc *Document) int {
	n := 0
	for _, item := range doc.Paths.Map() {
		n += len(item.Operations())
	}
	return n
}

// add counts one more operation's schemas, and refuses them beyond
// MaxSchemaBytes.
func (c *documentCost) add(name string, d idem.Descriptor) error {
	c.operations++
	n := len(d.InputSchema) + len(d.OutputSchema)
	c.schemaBytes += n
	if n > c.largestBytes {
		c.largest, c.largestBytes = name, n
	}
	if c.schemaBytes > MaxSchemaBytes {
		return fmt.Errorf("the input and answer schemas of the document's first %d operations, each with the component schemas it reaches, add up to more than %d MiB, the most idem proxy holds (the largest: operation %q, %d KiB): have fewer operations reach large components, or serve the API through several proxies, each with a document of a part of its operations",
			c.operations, MaxSchemaBytes>>20, c.largest, c.largestBytes>>10)
	}
	return nil
}
