package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
)

// toolResultSchema is the JSON Schema of an MCP CallToolResult, the body
// of a tool's HTTP answer.
var toolResultSchema = map[string]any{
	"type":     "object",
	"required": []string{"content"},
	"properties": map[string]any{
		"content":           map[string]any{"type": "array", "items": map[string]any{"type": "object"}, "description": "The upstream's content blocks."},
		"structuredContent": map[string]any{"type": "object", "description": "The upstream's structured result, when it gives one."},
		"isError":           map[string]any{"type": "boolean"},
		"_meta":             map[string]any{"type": "object"},
	},
	"description": "The upstream MCP server's CallToolResult, as it answered the call; a replay is the same bytes.",
}

// Document is the OpenAPI document idem gateway serves: the one idem
// builds from the operations (httpapi.OpenAPI), with each tool's answers
// said as they are: 200 with the upstream's CallToolResult (media type
// mcpserver.ToolResultMediaType, not the idem envelope), and 502 with the
// result of an upstream error (isError: true).
func Document(ops []idem.Operation, info httpapi.OpenAPIInfo) ([]byte, error) {
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(httpapi.OpenAPI(reg.Descriptors(), info), &doc); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, op := range ops {
		m := op.Metadata()
		item, _ := paths[m.Path].(map[string]any)
		post, _ := item[strings.ToLower(m.Method)].(map[string]any)
		responses, _ := post["responses"].(map[string]any)
		if responses == nil {
			continue
		}
		content := map[string]any{mcpserver.ToolResultMediaType: map[string]any{"schema": toolResultSchema}}
		ok, _ := responses["200"].(map[string]any)
		if ok == nil {
			ok = map[string]any{}
			responses["200"] = ok
		}
		ok["description"] = "The upstream's tool result. A replay of a completed attempt is the stored result, byte for byte, " +
			"with the header Idempotent-Replayed: true; Idem-Execution-Id names the execution."
		ok["content"] = content
		responses["502"] = map[string]any{
			"description": "The upstream's tool result with isError: true. The upstream failed after the call was sent, " +
				"perhaps after an effect: a keyed call's record is indeterminate, and a same-key retry answers 409 " +
				"IDEMPOTENCY_RESULT_INDETERMINATE; reconcile with the contract's reconcile tool.",
			"content": content,
		}
	}
	return json.Marshal(doc)
}
