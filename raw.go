package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/idem-run/idem/internal/schema"
)

// A raw operation (DefineRaw) takes the HTTP request as the surface
// received it and answers with an HTTP answer of its own: idem proxy
// declares one per operation of an upstream's OpenAPI document. The
// pipeline is the same as for a typed operation (SPEC §5–§9): contract
// checks, validation, the key's record, policies, approvals, reservation,
// lease, timeout, one final answer, audit. What differs is at the edges:
//   - the input is validated by the operation's own RawSpec.Validate (the
//     upstream's schemas), and a JSON body is fingerprinted canonically, a
//     body of another media type byte for byte (canonical.Request.Opaque);
//   - the answer is the handler's RawResponse as it is: its status, its
//     body, and the replayable headers (FilterReplayedHeaders); over HTTP
//     the surface adds Idem-Execution-Id (from Meta) and, on a replay,
//     Idempotent-Replayed: true.
//     Problems the pipeline itself produces are problem objects as usual.
//   - a handler error marked NotDispatched (nothing left this process)
//     frees the key instead of leaving the record indeterminate.

// RawRequest is a call to a raw operation, as validated by the pipeline.
type RawRequest struct {
	Method string
	// Path is the concrete path (the route with its parameters filled).
	Path       string
	PathParams map[string]string
	// Query is the intent's query (without the control parameter dryRun).
	Query url.Values
	// Header holds the caller's request headers (Intent.Passthrough) with
	// the declared header inputs (Intent.Header), which a surface without
	// headers of its own (MCP, the Go API) gives as arguments; nil when
	// there are neither.
	Header http.Header
	Body   []byte
}

// RawResponse is a raw operation's answer: sent to the caller as it is
// and, on a keyed call, stored for replay (status, body, the replayable
// headers).
type RawResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// RawHandler runs one attempt of a raw operation. It may return its answer
// together with an error marked NotDispatched when that answer says the
// request was not run (idem proxy: an upstream 429, or a 503 with
// Retry-After): the caller gets the answer, and a keyed execution frees
// its key instead of storing it.
type RawHandler func(ctx context.Context, call *Call, req RawRequest) (RawResponse, error)

// RawSpec is what a raw operation declares besides its Metadata.
type RawSpec struct {
	// Params are the flat arguments as the catalog and MCP publish them:
	// In "path", "query" or "header" (with the Header it travels in) with
	// the Type of their value, or "body" (a property of a JSON object
	// body). A header parameter is a declared header input, as a typed
	// operation's in:"header" field is: validated, fingerprinted, and in
	// RawRequest.Header on every surface. Every {name} of the route must be a
	// path parameter.
	Params []Param
	// InputSchema is the JSON Schema (2020-12) of the flat arguments, the
	// path and query parameters and the body's properties as one object,
	// as typed operations have it; nil is {}. OutputSchema is published
	// only.
	InputSchema, OutputSchema json.RawMessage
	// Unvalidated skips stage 4's checks (the schema, unknown query
	// parameters): the request is forwarded as it is. A JSON body must
	// still hold only values the fingerprint keeps exactly (SPEC §6.2:
	// acceptable JSON, integers within ±(2^53−1), no NUL), or two bodies
	// would share one fingerprint.
	Unvalidated bool
	// Target names what the handler sends the call to, when that is not
	// the same for every declaration of the operation (idem proxy: its
	// upstream's origin and path, TargetOf). It is part of the
	// fingerprint (canonical.Request.Target), so that declarations of one
	// operation in front of different targets, sharing a store, never
	// answer each other's keys: the same key there is a reuse (422).
	Target string
	// ArgumentsBody says the body is the JSON object of the call's
	// arguments and nothing else (idem gateway's tools): a body {} is no
	// body, so that {}, no body and absent MCP arguments are one intent
	// (SPEC §17 rulings). Elsewhere {} and no body differ (§6.2): an HTTP
	// upstream may tell them apart.
	ArgumentsBody bool
	// MCPTool is the MCP tool the operation fronts (idem gateway), as its
	// server lists it, in JSON: the MCP surface keeps its title,
	// outputSchema and the annotations the retry contract does not decide
	// on the tool it serves. Published only.
	MCPTool json.RawMessage
	Handler RawHandler
}

// TargetOf is the RawSpec.Target of an upstream URL: scheme and host lower
// case, the scheme's default port left out, the path without a trailing
// slash; no user information, query or fragment. So every spelling of one
// upstream is one target.
func TargetOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname())
	if port := u.Port(); port != "" && !(scheme == "http" && port == "80" || scheme == "https" && port == "443") {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/")
}

// HeaderExecutionID carries the execution of a raw operation's answer,
// which has no meta of its own (SPEC §15).
const HeaderExecutionID = "Idem-Execution-Id"

// rawName is the name rule of raw operations: any case, as an OpenAPI
// operationId is written, within what MCP tool names allow.
var rawName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// DefineRaw declares a raw operation (see RawRequest). Its name may be any
// case (an OpenAPI operationId as written); the other rules of SPEC §3
// apply unchanged.
func DefineRaw(meta Metadata, spec RawSpec) Operation {
	return &rawOp{meta: meta, spec: spec}
}

type rawOp struct {
	meta Metadata
	spec RawSpec
}

func (o *rawOp) Metadata() Metadata { return o.meta }

func (o *rawOp) compile() (*Compiled, error) {
	meta := o.meta.WithDefaults()
	if !rawName.MatchString(meta.Name) {
		return nil, fmt.Errorf("operation %q: a raw operation's name is 1 to 128 letters, digits, '_', '.' or '-'", meta.Name)
	}
	if o.spec.Handler == nil {
		return nil, fmt.Errorf("operation %q: no handler", meta.Name)
	}
	if meta.Retry.Transactional {
		return nil, fmt.Errorf("operation %q: a raw operation's effects are not in the store's database: it cannot be transactional", meta.Name)
	}
	located, err := locateParams(o.spec.InputSchema, o.spec.Params)
	if err != nil {
		return nil, fmt.Errorf("operation %q: input schema: %w", meta.Name, err)
	}
	input, err := schema.Compile(located)
	if err != nil {
		return nil, fmt.Errorf("operation %q: input schema: %w", meta.Name, err)
	}
	output, err := schema.Published(o.spec.OutputSchema) // published only: a raw answer is never validated
	if err != nil {
		return nil, fmt.Errorf("operation %q: output schema: %w", meta.Name, err)
	}
	params := make([]Param, len(o.spec.Params))
	headers := map[string]string{}
	for i, p := range o.spec.Params {
		switch p.In {
		case "body":
		case "path", "query", "header":
			kind, ok := paramKinds[p.Type]
			if !ok {
				return nil, fmt.Errorf("operation %q: %s parameter %q: type %q is not one of string, integer, number, boolean", meta.Name, p.In, p.Name, p.Type)
			}
			p.kind = kind
		default:
			return nil, fmt.Errorf("operation %q: parameter %q: in %q is not one of path, query, header, body", meta.Name, p.Name, p.In)
		}
		if p.In == "header" {
			h, err := headerInput(p.Header)
			if err != nil {
				return nil, fmt.Errorf("operation %q: header parameter %q: %w", meta.Name, p.Name, err)
			}
			if other, dup := headers[h]; dup {
				return nil, fmt.Errorf("operation %q: parameters %q and %q both read header %s; declare it once", meta.Name, other, p.Name, h)
			}
			headers[h], p.Header = p.Name, h
		}
		params[i] = p
	}
	spec := o.spec
	c := &Compiled{
		meta: meta, params: params, input: input, output: output, raw: &spec,
		invoke: func(ctx context.Context, call *Call, in any) (any, error) {
			return spec.Handler(ctx, call, in.(RawRequest))
		},
	}
	if meta.Retry.Preview {
		// The handler answers dry runs too: it sees Call.DryRun.
		c.preview = c.invoke
	}
	return c, nil
}

// locateParams returns the input schema with each path and query
// parameter's property annotated with where it travels (x-idem-in, as a
// typed operation's schema has it), so that the catalog tells a client
// that places flat arguments (idem call, idem mcp, the Go client) to put it
// in the path or the query rather than the body. Numbers keep their
// spelling; a property that is not an object schema (true) becomes one.
func locateParams(doc json.RawMessage, params []Param) (json.RawMessage, error) {
	if len(doc) == 0 || !slices.ContainsFunc(params, func(p Param) bool { return p.In != "body" }) {
		return doc, nil
	}
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	props, _ := root["properties"].(map[string]any)
	for _, p := range params {
		if p.In == "body" {
			continue
		}
		switch prop := props[p.Name].(type) {
		case map[string]any:
			prop[schema.LocationKeyword] = p.In
			if p.In == "header" {
				prop[schema.HeaderKeyword] = textproto.CanonicalMIMEHeaderKey(p.Header)
			}
		case bool:
			if prop {
				loc := map[string]any{schema.LocationKeyword: p.In}
				if p.In == "header" {
					loc[schema.HeaderKeyword] = textproto.CanonicalMIMEHeaderKey(p.Header)
				}
				props[p.Name] = loc
			}
		}
	}
	return json.Marshal(root)
}

// paramKinds maps a path or query parameter's JSON Schema type to the
// kind its string is read as (scalarJSON).
var paramKinds = map[string]reflect.Kind{
	"string": reflect.String, "integer": reflect.Int64, "number": reflect.Float64, "boolean": reflect.Bool,
}

// notDispatched marks a handler error after which nothing can have taken
// effect.
type notDispatched struct{ err error }

func (n notDispatched) Error() string { return n.err.Error() }
func (n notDispatched) Unwrap() error { return n.err }

// NotDispatched marks a handler's error as certain to have had no effect:
// the request it would have made never left this process (a connection
// refused or reset before any byte was written). A keyed execution that
// ends with it frees its key, and the caller may send the same key again
// (SPEC §15). A raw handler may return it beside the answer that says
// nothing happened (RawHandler). Use it only when nothing can have happened; when in doubt,
// return the error unmarked and the record is indeterminate.
func NotDispatched(err error) error {
	if err == nil {
		return nil
	}
	return notDispatched{err}
}

// IsNotDispatched reports whether err was marked with NotDispatched.
func IsNotDispatched(err error) bool {
	var n notDispatched
	return errors.As(err, &n)
}

// MediaType returns the media type of a Content-Type value, lower case,
// and whether it is JSON (application/json, or a +json suffix; absent
// counts as JSON, the default of a body the surface decodes).
func MediaType(contentType string) (string, bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(contentType))
	}
	return mt, mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// RawResultOf is the Result of a raw operation's answer received as bytes
// (over HTTP from idem proxy: it carries HeaderExecutionID), so that a
// remote answer reads like a local one; meta says what the caller knows
// (its operation and key), completed from the headers.
func RawResultOf(status int, header http.Header, body []byte, meta *Meta) Result {
	m := *meta
	m.ExecutionID = header.Get(HeaderExecutionID)
	replayed := header.Get(HeaderIdempotentReplayed) == "true"
	if m.Idempotency != nil {
		m.Idempotency = &IdempotencyMeta{Key: m.Idempotency.Key, Replayed: replayed}
	}
	res := RawResult(status, header, body, &m)
	res.Replayed = replayed
	return res
}

// RawResult is a raw operation's answer, fresh or replayed.
func RawResult(status int, header http.Header, body []byte, meta *Meta) Result {
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if body == nil {
		body = []byte{}
	}
	res := Result{Status: status, Header: h, Raw: true, Meta: meta, body: body}
	if _, isJSON := MediaType(h.Get("Content-Type")); isJSON && json.Valid(body) {
		res.Data = body
	}
	return res
}
