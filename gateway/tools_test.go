package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/proxy"
)

type noCall struct{}

func (noCall) Call(context.Context, *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	return nil, nil
}

func TestBuildContracts(t *testing.T) {
	obj := json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)
	tools := []*mcp.Tool{
		{Name: "read", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "put", InputSchema: obj, Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		{Name: "put_unreconciled", InputSchema: obj, Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		{Name: "send", InputSchema: obj},
		{Name: "drop", InputSchema: obj, Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		{Name: "charge", InputSchema: obj},
		{Name: "declared_read", InputSchema: obj},
		{Name: "keyed", InputSchema: json.RawMessage(`{"type":"object","properties":{"idempotencyKey":{"type":"string"}}}`)},
		{Name: "bad name!", InputSchema: obj},
		{Name: "array", InputSchema: json.RawMessage(`{"type":"array"}`)},
	}
	overlay := proxy.Overlay{
		"put":           {Reconcile: "read"},
		"charge":        {Kind: idem.RetrySameKeyReplay, Reconcile: "read", Rationale: "Charges once.", SideEffect: idem.SideEffectExternal, Approval: idem.ApprovalAlways, TimeoutMs: 5000},
		"declared_read": {Kind: idem.RetryFreshRead},
		"gone":          {Kind: idem.RetryFreshRead},
	}
	built, err := gateway.Build(tools, overlay, noCall{}, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]idem.Metadata{}
	for _, op := range built.Operations {
		m := op.Metadata()
		got[m.Name] = m
	}
	for name, want := range map[string]struct {
		kind   idem.RetryKind
		effect idem.SideEffect
	}{
		"read":             {idem.RetryFreshRead, idem.SideEffectRead},
		"put":              {idem.RetryConvergent, idem.SideEffectWrite},
		"put_unreconciled": {idem.RetryNoAutomaticRetry, idem.SideEffectWrite},
		"send":             {idem.RetryNoAutomaticRetry, idem.SideEffectWrite},
		"drop":             {idem.RetryNoAutomaticRetry, idem.SideEffectDestructive},
		"charge":           {idem.RetrySameKeyReplay, idem.SideEffectExternal},
		"declared_read":    {idem.RetryFreshRead, idem.SideEffectRead},
	} {
		m, ok := got[name]
		if !ok {
			t.Errorf("%s not declared", name)
			continue
		}
		if m.Retry.Kind != want.kind || m.SideEffect != want.effect || m.Method != "POST" || m.Path != "/tools/"+name {
			t.Errorf("%s: %s %s %s %s, want %s %s", name, m.Method, m.Path, m.Retry.Kind, m.SideEffect, want.kind, want.effect)
		}
	}
	if c := got["charge"]; c.Approval != idem.ApprovalAlways || c.Timeout.Milliseconds() != 5000 {
		t.Errorf("charge: approval %s, timeout %s", c.Approval, c.Timeout)
	}
	for _, name := range []string{"keyed", "bad name!", "array"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s is served", name)
		}
	}
	warnings := strings.Join(built.Warnings, "\n")
	for _, want := range []string{`tool "keyed" is not served`, `tool "bad name!" is not served`, `tool "array" is not served`,
		`declares "gone", which is no tool`, "writing tools have no declared retry contract and are no_automatic_retry (keys refused, nothing replayed): drop, send",
		"idempotentHint but name no reconcile read tool, so they are no_automatic_retry rather than convergent: put_unreconciled"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings lack %q:\n%s", want, warnings)
		}
	}
	if _, err := idem.NewRegistry(built.Operations...); err != nil {
		t.Fatalf("the declared operations do not register: %v", err)
	}
}

func TestDocumentSaysToolResults(t *testing.T) {
	obj := json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)
	built, err := gateway.Build([]*mcp.Tool{{Name: "read", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}}, nil, noCall{}, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := gateway.Document(built.Operations, httpapi.OpenAPIInfo{Version: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string                                      `json:"operationId"`
			Extension   map[string]any                              `json:"x-idem-agent-retry"`
			Responses   map[string]struct{ Content map[string]any } `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	op := d.Paths["/tools/read"]["post"]
	if op.OperationID != "read" || op.Extension["kind"] != "fresh_read" {
		t.Fatalf("/tools/read: %+v", op)
	}
	for _, status := range []string{"200", "502"} {
		if _, ok := op.Responses[status].Content[mcpserver.ToolResultMediaType]; !ok || len(op.Responses[status].Content) != 1 {
			t.Errorf("response %s: %v", status, op.Responses[status].Content)
		}
	}
}
