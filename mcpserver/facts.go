package mcpserver

import (
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
