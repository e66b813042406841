// Package gateway is idem gateway (SPEC §17; docs/gateway.md): idem's
// pipeline in front of an existing MCP server.
//
// Upstream is the gateway's MCP client session with that server, over
// streamable HTTP (the official go-sdk's StreamableClientTransport) or
// with the server spawned over stdio (stdioTransport: the SDK's framing
// over pipes of its own, which tell whether a byte of a call was
// written). It lists the tools (every page), tells when the server says
// its tools changed, and sends tools/call, telling apart a call that
// certainly never reached the server (idem.NotDispatched, 503
// UPSTREAM_UNAVAILABLE, the key stays free) from one that may have had an
// effect. A lost session is made again before the next call, never by
// sending a call twice; a call the upstream refused for a session it
// forgot is sent once to the new one.
//
// Below the SDK, the gateway's own HTTP transport (httpclient.go) keeps
// every layer under idem from re-sending a request, bounds each answer as
// it is read (a tool result, a tools/list page: toolslist.go), and
// resumes a call's SSE stream with Last-Event-ID until its answer comes
// (resume.go: SEP-1699 polling, which the SDK gives up on); over stdio a
// line reader does the bounding (stdio.go).
//
// Build declares one raw operation (idem.DefineRaw) per tool, named as the
// tool, at POST /tools/{name} with the arguments as the JSON body, its
// input schema the tool's; its contract from the --contracts overlay
// (proxy's format, keyed by tool name) or else from the tool's
// annotations. Its handler forwards the arguments and answers the
// upstream's CallToolResult as JSON of media type
// mcpserver.ToolResultMediaType: 200, or 502 for a result with isError
// (an upstream failure after the call was sent, so a keyed record is
// indeterminate). The MCP surface serves that result as it is, first and on
// every replay.
//
// Nothing of SPEC §6 lives here: keys, fingerprints, records, approvals
// and audit are the pipeline's, and the serving is package server's, as
// for idem serve and idem proxy.
package gateway
