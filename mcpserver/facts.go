package mcpserver

import (
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
)

// idem's facts about an answer, served in a tool result's _meta (SPEC
// §17 rulings): whether it is a replay, the execution that produced it
// and its attempts. They are added to the result as served, never to what
// is stored, so a gateway's stored CallToolResult stays the upstream's
// byte for byte and a replay over MCP is marked as one.
const (
	metaPrefix      = "io.idem/"
	MetaReplayed    = metaPrefix + "replayed"
	MetaExecutionID = metaPrefix + "executionId"
	MetaAttempts    = metaPrefix + "attempts"
	// MetaProblem holds idem's problem object on an error result of a
	// tool that declares an outputSchema (problemInMeta).
	MetaProblem = metaPrefix + "problem"
)

// withFacts adds res's facts to out's _meta. Members of out's own _meta
// under io.idem/ (an upstream's) are dropped first: only idem says them.
func withFacts(out *mcp.CallToolResult, res idem.Result) *mcp.CallToolResult {
	meta := mcp.Meta{}
	for k, v := range out.Meta {
		if !strings.HasPrefix(k, metaPrefix) {
			meta[k] = v
		}
	}
	m := res.Meta
	meta[MetaReplayed] = res.Replayed || (m != nil && m.Idempotency != nil && m.Idempotency.Replayed)
	if m != nil && m.ExecutionID != "" {
		meta[MetaExecutionID] = m.ExecutionID
	}
	if m != nil && m.Attempts > 0 {
		meta[MetaAttempts] = m.Attempts
	}
	out.Meta = meta
	return out
}

// declaresOutput reports whether the served tool declares an outputSchema
// (an idem gateway tool keeps its upstream's).
func declaresOutput(t Tool) bool {
	if len(t.Upstream) == 0 {
		return false
	}
	var up struct {
		OutputSchema json.RawMessage `json:"outputSchema"`
	}
	return json.Unmarshal(t.Upstream, &up) == nil && len(up.OutputSchema) > 0 && string(up.OutputSchema) != "null"
}

// problemInMeta moves the problem object of an error idem answers out of
// structuredContent into _meta (MetaProblem), for a tool that declares an
// outputSchema: clients check structuredContent against that schema even
// on an isError result (the TypeScript SDK does), and idem's problem is
// not the tool's output. The text content keeps "CODE: message".
func problemInMeta(out *mcp.CallToolResult, res idem.Result) *mcp.CallToolResult {
	if res.Problem == nil || out.StructuredContent == nil {
		return out
	}
	out.Meta[MetaProblem] = out.StructuredContent
	out.StructuredContent = nil
	return out
}
