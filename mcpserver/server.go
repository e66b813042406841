// Package mcpserver is idem's MCP surface (SPEC §10.2): one tool per
// operation exposed on mcp, named as the operation, with flat arguments,
// explicit annotations and a description that carries the retry contract.
//
// Tools are registered through the SDK's low-level Server.AddTool, which
// hands the raw arguments to the handler without validating them: the
// Runner (behind a Backend) stays the only place that validates input and
// builds the envelope. A result's structuredContent is that envelope, or
// the problem object with isError: true.
//
// The same server runs in-process over streamable HTTP at /mcp of
// `idem serve` (RunnerBackend, Handler) and over stdio in `idem mcp`
// (RemoteBackend, forwarding to an `idem serve` over HTTP).
package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/canonical"
)

// The arguments the MCP surface adds to a tool's input schema. The registry
// reserves both names, and New rejects a tool whose schema declares either.
const (
	ArgIdempotencyKey = "idempotencyKey"
	ArgDryRun         = "dryRun"
)

// Tool is what New needs to know about one operation.
type Tool struct {
	Name       string
	Method     string
	Path       string
	Summary    string
	SideEffect idem.SideEffect
	Retry      idem.RetryContract
	Surfaces   []idem.Surface
	// InputSchema is the operation's JSON Schema (an object schema).
	InputSchema json.RawMessage
	// Locations maps each path and query argument to "path" or "query";
	// the other arguments travel in the body.
	Locations map[string]string
	// Upstream is the MCP tool the operation fronts (idem gateway;
	// idem.RawSpec.MCPTool), nil for none: the served tool keeps its
	// title, outputSchema and the annotations the contract does not
	// decide.
	Upstream json.RawMessage `json:",omitempty"`
}

// Backend is what the tools call: the in-process runner, or a remote idem
// serve.
type Backend interface {
	// Descriptors lists every operation the backend can run.
	Descriptors(ctx context.Context) ([]Tool, error)
	// Call runs operation name with its flat arguments (the reserved ones
	// removed) and returns the answer, typed: the envelope's data and meta,
	// or the problem object, with the body HTTP would give (Result.Body).
	// idempotencyKey is "" for none. An error means there is no answer (a
	// network failure); an *idem.Error keeps its code.
	Call(ctx context.Context, name string, args map[string]json.RawMessage, idempotencyKey string, dryRun bool) (idem.Result, error)
}

// Options configure New.
type Options struct {
	// Name and Version identify the server in the MCP handshake ("idem"
	// and "dev" when empty).
	Name    string
	Version string
	// Logger receives the SDK's logs; none when nil.
	Logger *slog.Logger
	// Forward serves resources, prompts and completions from the server
	// idem fronts (idem gateway); none when nil.
	Forward Forwarder
	// ReadLog receives a line for each read Forward serves; none when nil.
	ReadLog *slog.Logger
}

// instructions are sent to clients in the initialize result.
const instructions = "Each tool is one idem operation. Read a tool's description before retrying it: it states the " +
	"operation's retry contract and the tool to reconcile with. Tools that take idempotencyKey replay by key: generate " +
	"a key, keep it in durable task state before the first call, and resend identical arguments with the same key " +
	"after an ambiguous outcome (a replay, marked by _meta \"io.idem/replayed\": true, reports the original attempt; " +
	"reconcile before reporting current state). " +
	"structuredContent is the idem envelope {data, meta} (behind idem gateway, a tool's result is the upstream " +
	"server's own, replayed as stored); an error that idem answers (isError) carries the problem object with a " +
	"stable code. Approvals are decided by people, outside MCP."

// New returns an MCP server with one tool per operation of b that is
// exposed on mcp. It fails when an operation's input schema is not an
// object schema or declares a reserved argument name.
func New(ctx context.Context, b Backend, opts Options) (*mcp.Server, error) {
	tools, err := toolsOf(ctx, b)
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "idem"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	sopts := &mcp.ServerOptions{Instructions: instructions, Logger: opts.Logger}
	var forward mcp.Middleware
	if opts.Forward != nil {
		forward = forwarding(opts.Forward, sopts, opts.ReadLog)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: opts.Name, Version: opts.Version}, sopts)
	if forward != nil {
		srv.AddReceivingMiddleware(forward)
		if r, ok := opts.Forward.(UpdateRelay); ok {
			r.RelayUpdates(srv.ResourceUpdated)
		}
		if r, ok := opts.Forward.(ListRelay); ok {
			r.RelayListChanged(func(method string) { listChanged(srv, method) })
		}
	}
	for _, t := range tools {
		srv.AddTool(t.tool, t.handler)
	}
	return srv, nil
}

// Published is what a server lists: each tool's name and a digest of its
// declaration (the MCP tool and the operation behind it), so that Update
// can tell what changed.
type Published map[string]string

// PublishedOf is the Published of b's tools, as New puts them on a server.
func PublishedOf(ctx context.Context, b Backend) (Published, error) {
	tools, err := toolsOf(ctx, b)
	if err != nil {
		return nil, err
	}
	p := make(Published, len(tools))
	for _, t := range tools {
		p[t.tool.Name] = t.digest
	}
	return p, nil
}

// Update makes srv's tools those of b's operations now: a tool that is new
// or whose declaration changed since previous is added (replacing the old
// one), and one that is gone is removed; the SDK tells connected clients
// with notifications/tools/list_changed, so they hear of a change, and of
// nothing when nothing changed. It returns what srv lists now; on error
// srv is unchanged.
func Update(ctx context.Context, srv *mcp.Server, b Backend, previous Published) (Published, error) {
	tools, err := toolsOf(ctx, b)
	if err != nil {
		return previous, err
	}
	now := make(Published, len(tools))
	for _, t := range tools {
		now[t.tool.Name] = t.digest
		if previous[t.tool.Name] != t.digest {
			srv.AddTool(t.tool, t.handler)
		}
	}
	var gone []string
	for name := range previous {
		if _, ok := now[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		srv.RemoveTools(gone...)
	}
	return now, nil
}

type boundTool struct {
	tool    *mcp.Tool
	handler mcp.ToolHandler
	// digest names the declaration: the tool as listed and the operation
	// its handler calls.
	digest string
}

// declarationDigest is the boundTool digest of tool and t.
func declarationDigest(tool *mcp.Tool, t Tool) string {
	h := sha256.New()
	for _, v := range []any{tool, t} {
		b, _ := json.Marshal(v)
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// toolsOf builds the tools of b's operations exposed on mcp.
func toolsOf(ctx context.Context, b Backend) ([]boundTool, error) {
	descs, err := b.Descriptors(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: list operations: %w", err)
	}
	var out []boundTool
	var errs []error
	for _, t := range descs {
		if !slices.Contains(t.Surfaces, idem.SurfaceMCP) {
			continue
		}
		tool, err := NewTool(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, boundTool{tool, handler(b, t), declarationDigest(tool, t)})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("mcpserver: %w", errors.Join(errs...))
	}
	return out, nil
}

// NewTool builds the MCP tool of an operation (SPEC §10.2): named as the
// operation; its input schema plus idempotencyKey (required) on
// same_key_replay tools and dryRun on preview tools; annotations set
// explicitly, false included; a description with the summary, the retry
// contract and the reconcile tool.
func NewTool(t Tool) (*mcp.Tool, error) {
	schema, err := toolSchema(t)
	if err != nil {
		return nil, fmt.Errorf("operation %q: %w", t.Name, err)
	}
	effect := t.SideEffect
	kind := t.Retry.Kind
	tool := &mcp.Tool{
		Name:        t.Name,
		Description: description(t),
		InputSchema: schema,
		Annotations: &mcp.ToolAnnotations{
			ReadOnlyHint:    effect == idem.SideEffectNone || effect == idem.SideEffectRead,
			DestructiveHint: ptr(effect == idem.SideEffectDestructive),
			IdempotentHint:  kind == idem.RetryFreshRead || kind == idem.RetryConvergent || kind == idem.RetryIntrinsicReplay,
			OpenWorldHint:   ptr(effect == idem.SideEffectExternal),
		},
	}
	if len(t.Upstream) > 0 {
		var up mcp.Tool
		if err := json.Unmarshal(t.Upstream, &up); err != nil {
			return nil, fmt.Errorf("operation %q: its upstream MCP tool: %w", t.Name, err)
		}
		// What the contract does not decide is the upstream's: the title,
		// the output schema (its structuredContent is served as it is),
		// the annotations' title, and openWorldHint unless the declared
		// side effect is external.
		tool.Title, tool.OutputSchema = up.Title, up.OutputSchema
		if a := up.Annotations; a != nil {
			tool.Annotations.Title = a.Title
			if a.OpenWorldHint != nil && effect != idem.SideEffectExternal {
				tool.Annotations.OpenWorldHint = a.OpenWorldHint
			}
		}
	}
	return tool, nil
}

func ptr[T any](v T) *T { return &v }

// description is the summary, the retry contract with its rationale, how to
// use the reserved arguments, and the reconcile tool.
func description(t Tool) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(t.Summary))
	fmt.Fprintf(&b, "\n\nRetry contract: %s.", t.Retry.Kind)
	if r := strings.TrimSpace(t.Retry.Rationale); r != "" {
		b.WriteString(" " + r)
	}
	switch t.Retry.Kind {
	case idem.RetryFreshRead:
		b.WriteString(" Repeat it freely; every call reads current state.")
	case idem.RetrySameKeyReplay:
		b.WriteString(" Send idempotencyKey: generate it once per intent and keep it in durable task state before the first call; " +
			"after an ambiguous outcome resend the identical arguments with the same key. A replay " +
			"(the result's _meta \"io.idem/replayed\": true) is proof of the original attempt, not current state.")
	case idem.RetryConvergent:
		b.WriteString(" Send no idempotencyKey. After an ambiguous outcome, reconcile and repeat only if the current state still differs.")
	case idem.RetryIntrinsicReplay:
		b.WriteString(" Send no idempotencyKey: repeating it is safe and returns the same transition.")
	case idem.RetryNoAutomaticRetry:
		b.WriteString(" Never retry it automatically; after an ambiguous outcome request a fresh one.")
	case idem.RetryPreview:
		b.WriteString(" A fresh preview that changes nothing; send no idempotencyKey.")
	}
	if t.Retry.Preview {
		b.WriteString(" dryRun: true previews the call without changing anything (send no idempotencyKey with it).")
	}
	if t.Retry.Reconcile != "" {
		fmt.Fprintf(&b, " Reconcile tool: %s (run it before reporting current state).", t.Retry.Reconcile)
	}
	return b.String()
}

// handler answers tools/call for one tool through b.
func handler(b Backend, t Tool) mcp.ToolHandler {
	ownDryRun := ownsDryRun(t)
	served := func(res idem.Result) *mcp.CallToolResult { return withFacts(result(res), res) }
	if declaresOutput(t) {
		served = func(res idem.Result) *mcp.CallToolResult { return problemInMeta(withFacts(result(res), res), res) }
	}
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		meta := &idem.Meta{Operation: t.Name}
		// The call continues the agent's trace (traceparent in _meta),
		// under its tools/call span when the request is traced.
		ctx, span := startToolCall(ctx, t.Name, req)
		var out *mcp.CallToolResult
		defer func() { endToolCall(span, out) }()
		args, key, dryRun, err := splitArguments(t, req.Params.Arguments, ownDryRun)
		if err == nil {
			key, err = keyOutsideArguments(t, req.Params.Meta, key)
		}
		if err != nil {
			out = served(idem.ErrorResult(err, meta))
			return out, nil
		}
		ctx = withPeer(withProgress(ctx, req), req)
		if c, ok := callerOf(req); ok {
			// The stream is the call's connection (idem.Invocation.Connection):
			// its end cancels the call unless it is keyed and reserved.
			// notifications/cancelled cancels ctx itself, keyed or not.
			ctx = withConnection(WithPrincipal(ctx, c.principal), c.stream)
		}
		res, err := b.Call(ctx, t.Name, args, key, dryRun)
		if err != nil {
			if ctx.Err() != nil && idem.ErrorCode(err) != idem.CodeCancelled {
				err = idem.Errorf(idem.CodeCancelled, "the caller cancelled the call")
			}
			res = idem.ErrorResult(err, meta)
		}
		out = served(res)
		return out, nil
	}
}

// splitArguments parses a call's arguments and takes the reserved ones out
// (dryRun stays when it is the tool's own argument, ownDryRun). Only their
// types are checked here; everything else is the runner's.
func splitArguments(t Tool, raw json.RawMessage, ownDryRun bool) (args map[string]json.RawMessage, key string, dryRun bool, err error) {
	args = map[string]json.RawMessage{}
	if s := strings.TrimSpace(string(raw)); s != "" && s != "null" {
		if json.Unmarshal(raw, &args) != nil || args == nil {
			return nil, "", false, invalid("", "the arguments must be a JSON object")
		}
		// A map keeps the last of repeated names: refuse them instead, so
		// that {"dryRun": true, "dryRun": false} cannot run live.
		if _, err := canonical.Transform(raw); err != nil {
			return nil, "", false, invalid("", fmt.Sprintf("the arguments must be one JSON object, each name given once (%v)", err))
		}
	}
	// The control arguments in the order of SPEC §6.4, as HTTP reads
	// them: dryRun, then the key.
	if v, ok := args[ArgDryRun]; ok && !ownDryRun {
		delete(args, ArgDryRun)
		// The JSON literal true or false is the query value the runner
		// takes: one rule for every surface (null, "true" or 1 are refused).
		if dryRun, err = idem.ParseDryRun([]string{string(bytes.TrimSpace(v))}); err != nil {
			return nil, "", false, err
		}
	}
	if v, ok := args[ArgIdempotencyKey]; ok {
		delete(args, ArgIdempotencyKey)
		if t.Retry.ReadsKey() {
			if json.Unmarshal(v, &key) != nil {
				return nil, "", false, idem.Errorf(idem.CodeIdempotencyKeyInvalid, "idempotencyKey must be a string of 1 to %d characters", idem.MaxKeyLength)
			}
			if key == "" {
				return nil, "", false, idem.ValidateKey(key)
			}
		}
	}
	return args, key, dryRun, nil
}

func invalid(path, message string) error {
	return idem.Errorf(idem.CodeInvalidInput, "invalid input: %s", message).
		WithDetail("errors", []map[string]string{{"path": path, "message": message}})
}

// result is the tool result of one answer (SPEC §10.2): structuredContent
// is the envelope, or the problem object with isError and one text content
// "CODE: message", read from the typed answer.
func result(res idem.Result) *mcp.CallToolResult {
	if res.Raw {
		if tr, ok := toolResultOf(res); ok {
			return tr // an upstream MCP server's own result (idem gateway)
		}
		return rawResult(res)
	}
	if (res.Status < 200 || res.Status >= 400) && res.Problem == nil {
		res = brokenAnswer(res.Status) // a backend that broke its contract
	}
	body := res.Body()
	if res.Problem == nil {
		return &mcp.CallToolResult{
			StructuredContent: json.RawMessage(body),
			Content:           []mcp.Content{&mcp.TextContent{Text: string(body)}},
		}
	}
	return &mcp.CallToolResult{
		IsError:           true,
		StructuredContent: json.RawMessage(body),
		Content:           []mcp.Content{&mcp.TextContent{Text: string(res.Problem.Code) + ": " + res.Problem.Detail}},
	}
}

// rawResult is the tool result of a raw operation's answer (idem proxy):
// the upstream's body cannot carry meta, so structuredContent wraps it as
// {status, data, meta}, data being the body's JSON or, for another media
// type, its text. An answer of 400 or more is an error whose text content
// is "HTTP status: " and the start of the body.
func rawResult(res idem.Result) *mcp.CallToolResult {
	var data any = json.RawMessage(res.Data)
	if res.Data == nil {
		data = string(res.Body())
	}
	sc, err := json.Marshal(struct {
		Status int        `json:"status"`
		Data   any        `json:"data"`
		Meta   *idem.Meta `json:"meta,omitempty"`
	}{res.Status, data, res.Meta})
	if err != nil {
		return result(idem.ErrorResult(err, res.Meta))
	}
	out := &mcp.CallToolResult{StructuredContent: json.RawMessage(sc), Content: []mcp.Content{&mcp.TextContent{Text: string(sc)}}}
	if res.Status >= 400 {
		text := string(res.Body())
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		out.IsError = true
		out.Content = []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("HTTP %d: %s", res.Status, text)}}
	}
	return out
}

// callerOf returns the caller Handler recorded for the HTTP request that
// carried req; none over stdio.
func callerOf(req *mcp.CallToolRequest) (*caller, bool) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil, false
	}
	c, ok := req.Extra.TokenInfo.Extra[callerExtra].(*caller)
	return c, ok
}

// metaCarrier reads the W3C trace context (traceparent, tracestate) from a
// request's _meta, where MCP clients put it.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
