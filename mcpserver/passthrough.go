package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
)

// What idem gateway (SPEC §17) needs of this surface, kept apart from the
// rest: a tool whose answer is an upstream MCP server's own tool result,
// and idempotency keys that arrive outside the arguments.

// ToolResultMediaType is the Content-Type of a raw operation's answer whose
// body is an MCP CallToolResult (idem gateway's tools). Over MCP such an
// answer is that result as it is, stored and replayed, rather than the
// {status, data, meta} wrapping of other raw answers; over HTTP it is the
// body, a JSON object.
const ToolResultMediaType = "application/vnd.idem.mcp-tool-result+json"

// MetaIdempotencyKey is the member of a tools/call request's _meta that
// may carry the call's idempotency key, as the flat idempotencyKey
// argument does.
const MetaIdempotencyKey = "idempotencyKey"

// liftedKey is the _meta member liftParamsKey moves a key given as a
// top-level member of the params (params.idempotencyKey) into, since the
// SDK keeps only the members it knows.
const liftedKey = "io.idem/params.idempotencyKey"

// toolResultOf reads an answer of media type ToolResultMediaType as the
// tool result it holds. Each content and structuredContent keep their
// bytes (rawContent): the result is served as it was stored, and read
// with encoding/json rather than the SDK's decoder, which allocates a 32
// KiB buffer per value it decodes (go-sdk v1.8.0; issue 34). A result with
// members only the SDK's decoding keeps (resultType, inputRequests,
// requestState) is read by the SDK.
func toolResultOf(res idem.Result) (*mcp.CallToolResult, bool) {
	if res.Header == nil {
		return nil, false
	}
	if mt, _ := idem.MediaType(res.Header.Get("Content-Type")); mt != ToolResultMediaType {
		return nil, false
	}
	body := res.Body()
	var wire struct {
		Meta              mcp.Meta          `json:"_meta"`
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
		IsError           bool              `json:"isError"`
		ResultType        json.RawMessage   `json:"resultType"`
		InputRequests     json.RawMessage   `json:"inputRequests"`
		RequestState      json.RawMessage   `json:"requestState"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, false
	}
	if wire.ResultType != nil || wire.InputRequests != nil || wire.RequestState != nil {
		return sdkToolResult(body)
	}
	out := &mcp.CallToolResult{Meta: wire.Meta, IsError: wire.IsError, Content: make([]mcp.Content, 0, len(wire.Content))}
	for _, c := range wire.Content {
		if len(c) == 0 || c[0] != '{' {
			return sdkToolResult(body) // not a content: the SDK says why
		}
		out.Content = append(out.Content, rawContent{TextContent: &mcp.TextContent{}, raw: c})
	}
	if len(wire.StructuredContent) > 0 && string(wire.StructuredContent) != "null" {
		out.StructuredContent = wire.StructuredContent
	}
	return out, true
}

// sdkToolResult reads body with the SDK's decoding. structuredContent
// keeps its bytes.
func sdkToolResult(body []byte) (*mcp.CallToolResult, bool) {
	var out mcp.CallToolResult
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, false
	}
	var sc struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if json.Unmarshal(body, &sc) == nil && len(sc.StructuredContent) > 0 && string(sc.StructuredContent) != "null" {
		out.StructuredContent = sc.StructuredContent
	}
	if out.Content == nil {
		out.Content = []mcp.Content{} // content is required on the wire
	}
	return &out, true
}

// rawContent is a content of a stored tool result, served as the bytes
// stored. It embeds a TextContent only to be an mcp.Content, an interface
// with an unexported method; its MarshalJSON is its own.
type rawContent struct {
	*mcp.TextContent
	raw json.RawMessage
}

func (c rawContent) MarshalJSON() ([]byte, error) { return c.raw, nil }

// keyOutsideArguments returns the key a tools/call request carries in its
// _meta (idempotencyKey, or the params' own idempotencyKey that
// liftParamsKey moved there), checked against the key of the arguments:
// the same key given twice is one key, two different keys are refused.
func keyOutsideArguments(t Tool, meta mcp.Meta, key string) (string, error) {
	if !t.Retry.ReadsKey() || meta == nil {
		return key, nil
	}
	for _, name := range []string{MetaIdempotencyKey, liftedKey} {
		v, ok := meta[name]
		if !ok {
			continue
		}
		s, isString := v.(string)
		if !isString || s == "" {
			return "", idem.Errorf(idem.CodeIdempotencyKeyInvalid, "the idempotency key in the call's params must be a string of 1 to %d characters", idem.MaxKeyLength)
		}
		if key != "" && key != s {
			return "", idem.Errorf(idem.CodeIdempotencyKeyInvalid, "the call carries two different idempotency keys (in its arguments, its params or its _meta); send one")
		}
		key = s
	}
	return key, nil
}

// liftParamsKey lets a tools/call request carry its key as a top-level
// member of its params ({"name": …, "arguments": …, "idempotencyKey": …}):
// it moves that member into _meta, where the tool handler finds it, before
// the SDK (which drops members it does not know) reads the message. Other
// requests pass unchanged. HTTPHandler calls it once the caller is
// authenticated and admitted, so that no body is read for a caller it
// refuses; the stdio bridge calls liftKeys on each line.
func liftParamsKey(w http.ResponseWriter, r *http.Request, limit int64) bool {
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		return true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		http.Error(w, fmt.Sprintf("request body exceeds %d bytes", limit), http.StatusRequestEntityTooLarge)
		return false
	}
	if bytes.Contains(body, []byte(`"idempotencyKey"`)) {
		body = liftKeys(body)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return true
}

// liftKeys rewrites one JSON-RPC message or a batch; anything it cannot
// read passes as it is, for the SDK to answer.
func liftKeys(body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if strings.HasPrefix(string(trimmed), "[") {
		var batch []json.RawMessage
		if json.Unmarshal(trimmed, &batch) != nil {
			return body
		}
		for i, m := range batch {
			batch[i] = liftKey(m)
		}
		out, err := json.Marshal(batch)
		if err != nil {
			return body
		}
		return out
	}
	return liftKey(body)
}

func liftKey(msg []byte) []byte {
	// The body holds "idempotencyKey" (liftParamsKey), most often in
	// _meta or the arguments, where it stays: one decode that keeps
	// nothing else says whether the params hold one.
	var probe struct {
		Method string `json:"method"`
		Params struct {
			Key json.RawMessage `json:"idempotencyKey"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &probe) != nil || probe.Method != "tools/call" || probe.Params.Key == nil {
		return msg
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil || string(m["method"]) != `"tools/call"` {
		return msg
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(m["params"], &params) != nil {
		return msg
	}
	key, ok := params[MetaIdempotencyKey]
	if !ok {
		return msg
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := params["_meta"]; ok && json.Unmarshal(raw, &meta) != nil {
		return msg
	}
	meta[liftedKey] = key
	delete(params, MetaIdempotencyKey)
	var err error
	if params["_meta"], err = json.Marshal(meta); err != nil {
		return msg
	}
	if m["params"], err = json.Marshal(params); err != nil {
		return msg
	}
	out, err := json.Marshal(m)
	if err != nil {
		return msg
	}
	return out
}
