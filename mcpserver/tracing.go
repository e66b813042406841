package mcpserver

// Tracing of tools/call (docs/tracing.md): over streamable HTTP, when
// server.Handler traces the request (its otelhttp span is the stream's),
// a tool call is a server span with the attributes of OpenTelemetry's MCP
// semantic conventions, the parent of the call's idem.call span. Its
// parent is the agent's trace context from the request's _meta, linked to
// the HTTP request's span, or that span when _meta has none. Without a
// traced request (stdio, tracing off) there is no such span: the runner's
// idem.call continues the _meta's context by itself.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
)

// tracerName is the instrumentation scope of the tool call spans.
const tracerName = "github.com/idem-run/idem/mcpserver"

// The MCP semantic conventions' attributes (the gen-ai registry's).
const (
	attrMethodName      = attribute.Key("mcp.method.name")
	attrSessionID       = attribute.Key("mcp.session.id")
	attrProtocolVersion = attribute.Key("mcp.protocol.version")
	attrToolName        = attribute.Key("gen_ai.tool.name")
	attrOperationName   = attribute.Key("gen_ai.operation.name")
	attrNetTransport    = attribute.Key("network.transport")
	attrErrorType       = attribute.Key("error.type")
)

const methodToolsCall = "tools/call"

// startToolCall returns the context a tools/call of tool runs in: the
// agent's trace context from _meta, and the tool call's span when the
// request is traced (nil otherwise).
func startToolCall(ctx context.Context, tool string, req *mcp.CallToolRequest) (context.Context, trace.Span) {
	var agent trace.SpanContext
	if m := req.Params.Meta; m != nil {
		agent = trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), metaCarrier(m)))
	}
	var transport trace.Span
	if c, ok := callerOf(req); ok {
		// The SDK's ctx may carry another request's span (the session's
		// first): this request's, or none, is the ambient one.
		transport = trace.SpanFromContext(c.stream)
		ctx = trace.ContextWithSpan(ctx, transport)
	}
	if transport == nil || !transport.IsRecording() {
		if agent.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, agent)
		}
		return ctx, nil
	}
	attrs := []attribute.KeyValue{
		attrMethodName.String(methodToolsCall), attrToolName.String(tool), attrOperationName.String("execute_tool"),
		attrNetTransport.String("tcp"),
	}
	if id := req.Session.ID(); id != "" {
		attrs = append(attrs, attrSessionID.String(sessionDigest(id)))
	}
	if p := req.Session.InitializeParams(); p != nil && p.ProtocolVersion != "" {
		attrs = append(attrs, attrProtocolVersion.String(p.ProtocolVersion))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	parent := ctx
	if agent.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, agent)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: transport.SpanContext()}))
	}
	return transport.TracerProvider().Tracer(tracerName).Start(parent, methodToolsCall+" "+tool, opts...)
}

// endToolCall ends a tool call's span with its result: an error result is
// error.type tool_error, as the conventions have it (the problem's code is
// on idem.call).
func endToolCall(span trace.Span, res *mcp.CallToolResult) {
	if span == nil {
		return
	}
	if res.IsError {
		span.SetAttributes(attrErrorType.String("tool_error"))
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// sessionDigest stands for a session id in mcp.session.id: whoever holds
// the id itself may resume the session's stream, so spans carry a digest
// that correlates the same without being it.
func sessionDigest(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// StartClientCall is the tracing of a tools/call idem sends to an upstream
// MCP server (idem gateway): a CLIENT span "tools/call {tool}" with the
// MCP semantic conventions' attributes, under the attempt's span when ctx
// has a recording one, and the trace context (traceparent, tracestate)
// injected into params' _meta, where MCP servers read it; without a
// recording span the context ctx carries, if any, is injected as it is.
// end ends the span with the call's outcome: an error, or an error result
// (error.type tool_error).
func StartClientCall(ctx context.Context, params *mcp.CallToolParams) (_ context.Context, end func(*mcp.CallToolResult, error)) {
	end = func(*mcp.CallToolResult, error) {}
	if parent := trace.SpanFromContext(ctx); parent.IsRecording() {
		attrs := []attribute.KeyValue{
			attrMethodName.String(methodToolsCall), attrToolName.String(params.Name), attrOperationName.String("execute_tool"),
		}
		var span trace.Span
		ctx, span = parent.TracerProvider().Tracer(tracerName).Start(ctx, methodToolsCall+" "+params.Name,
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		end = func(res *mcp.CallToolResult, err error) {
			switch {
			case err != nil:
				span.SetAttributes(attrErrorType.String(string(idem.ErrorCode(err))))
				span.SetStatus(codes.Error, err.Error())
			case res != nil && res.IsError:
				span.SetAttributes(attrErrorType.String("tool_error"))
				span.SetStatus(codes.Error, "")
			}
			span.End()
		}
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		meta := mcp.Meta{}
		for k, v := range params.Meta {
			meta[k] = v
		}
		propagation.TraceContext{}.Inject(ctx, metaCarrier(meta))
		params.Meta = meta
	}
	return ctx, end
}
