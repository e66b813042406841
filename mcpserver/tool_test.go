package mcpserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/mcpserver"
)

// fakeBackend serves fixed tools and answers nothing.
type fakeBackend []mcpserver.Tool

func (b fakeBackend) Descriptors(context.Context) ([]mcpserver.Tool, error) { return b, nil }
func (b fakeBackend) Call(context.Context, string, map[string]json.RawMessage, string, bool) (idem.Result, error) {
	return idem.Result{Status: 500}, nil
}

func tool(kind idem.RetryKind, schema string) mcpserver.Tool {
	return mcpserver.Tool{
		Name: "thing.do", Method: "POST", Path: "/v1/things", Summary: "Do a thing.", SideEffect: idem.SideEffectWrite,
		Retry:    idem.RetryContract{Kind: kind, Reconcile: "thing.show", Rationale: "Because."}.WithDefaults(),
		Surfaces: []idem.Surface{idem.SurfaceHTTP, idem.SurfaceMCP}, InputSchema: json.RawMessage(schema),
	}
}

// previewTool is tool with a preview (the MCP surface adds dryRun).
func previewTool(schema string) mcpserver.Tool {
	t := tool(idem.RetryConvergent, schema)
	t.Retry.Preview = true
	return t
}

// The registry reserves the MCP surface's argument names.
func TestRegistryReservesTheMCPArguments(t *testing.T) {
	type withKey struct {
		Key string `json:"idempotencyKey"`
	}
	type withDryRun struct {
		DryRun bool `json:"dryRun" in:"query"`
	}
	meta := idem.Metadata{Name: "thing.do", Method: "POST", Path: "/v1/things", Summary: "Do", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryNoAutomaticRetry}}
	for name, op := range map[string]idem.Operation{
		"idempotencyKey": idem.Define(meta, func(context.Context, *idem.Call, withKey) (struct{}, error) { return struct{}{}, nil }),
		"dryRun":         idem.Define(meta, func(context.Context, *idem.Call, withDryRun) (struct{}, error) { return struct{}{}, nil }),
	} {
		if _, err := idem.NewRegistry(op); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("a field named %s: NewRegistry = %v, want the reserved-argument error", name, err)
		}
	}
}

// New rejects a schema that declares a reserved argument (a backend whose
// catalog the registry did not check) or is not an object schema.
func TestNewRejectsCollisionsAndBadSchemas(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tool   mcpserver.Tool
		errHas string
	}{
		{"idempotencyKey on a same-key tool", tool(idem.RetrySameKeyReplay, `{"type":"object","properties":{"idempotencyKey":{"type":"string"}}}`), `"idempotencyKey" collides`},
		{"idempotencyKey on any tool", tool(idem.RetryConvergent, `{"type":"object","properties":{"idempotencyKey":{"type":"string"}}}`), `"idempotencyKey" collides`},
		{"dryRun on a preview tool", previewTool(`{"type":"object","properties":{"dryRun":{"type":"boolean"}}}`), `"dryRun" collides`},
		{"not an object schema", tool(idem.RetryConvergent, `{"type":"array"}`), `"type" must be "object"`},
		{"not JSON", tool(idem.RetryConvergent, `{"type":`), "input schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcpserver.New(t.Context(), fakeBackend{tc.tool}, mcpserver.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "thing.do") {
				t.Fatalf("New = %v, want an error naming thing.do with %q", err, tc.errHas)
			}
		})
	}
}

func TestNewToolSchemaAndDescription(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tool      mcpserver.Tool
		preview   bool
		schema    string
		descHas   []string
		descHasnt []string
	}{
		{
			name:    "same_key_replay adds a required key, keeping members in order",
			tool:    tool(idem.RetrySameKeyReplay, `{"$schema":"x","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"additionalProperties":false,"type":"object","required":["b"]}`),
			schema:  `{"$schema":"x","properties":{"b":{"type":"string"},"a":{"type":"integer"},"idempotencyKey":` + keySchema + `},"additionalProperties":false,"type":"object","required":["b","idempotencyKey"]}`,
			descHas: []string{"Do a thing.", "Retry contract: same_key_replay. Because.", "Send idempotencyKey", "Reconcile tool: thing.show"},
		},
		{
			name:      "convergent with preview adds dryRun",
			tool:      tool(idem.RetryConvergent, `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`),
			preview:   true,
			schema:    `{"type":"object","properties":{"a":{"type":"integer"},"dryRun":` + dryRunSchema + `},"additionalProperties":false}`,
			descHas:   []string{"Retry contract: convergent. Because.", "dryRun: true previews", "Send no idempotencyKey", "Reconcile tool: thing.show"},
			descHasnt: []string{"Send idempotencyKey"},
		},
		{
			name:    "no properties",
			tool:    tool(idem.RetryNoAutomaticRetry, `{"type":"object"}`),
			schema:  `{"type":"object","properties":{}}`,
			descHas: []string{"Retry contract: no_automatic_retry. Because.", "Never retry it automatically"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tool.Retry.Preview = tc.preview
			got, err := mcpserver.NewTool(tc.tool)
			if err != nil {
				t.Fatal(err)
			}
			if s := string(got.InputSchema.(json.RawMessage)); s != tc.schema {
				t.Errorf("schema\n%s\nwant\n%s", s, tc.schema)
			}
			for _, want := range tc.descHas {
				if !strings.Contains(got.Description, want) {
					t.Errorf("description %q lacks %q", got.Description, want)
				}
			}
			for _, unwanted := range tc.descHasnt {
				if strings.Contains(got.Description, unwanted) {
					t.Errorf("description %q has %q", got.Description, unwanted)
				}
			}
		})
	}
}

// The schemas New adds, as they appear on the wire.
const (
	keySchema    = `{"type":"string","minLength":1,"maxLength":255,"pattern":"^[A-Za-z0-9._~:/+=@-]+$","description":"Idempotency key of this intent: generate it once (e.g. a UUID), keep it in durable task state before the first call, and resend it with identical arguments after an ambiguous outcome."}`
	dryRunSchema = `{"type":"boolean","description":"true previews the call without changing anything; send no idempotencyKey with it."}`
)

func TestAnnotationsFromTheDeclaration(t *testing.T) {
	for _, tc := range []struct {
		effect                                       idem.SideEffect
		kind                                         idem.RetryKind
		readOnly, destructive, idempotent, openWorld bool
	}{
		{idem.SideEffectNone, idem.RetryPreview, true, false, false, false},
		{idem.SideEffectRead, idem.RetryFreshRead, true, false, true, false},
		{idem.SideEffectWrite, idem.RetrySameKeyReplay, false, false, false, false},
		{idem.SideEffectWrite, idem.RetryConvergent, false, false, true, false},
		{idem.SideEffectWrite, idem.RetryIntrinsicReplay, false, false, true, false},
		{idem.SideEffectWrite, idem.RetryNoAutomaticRetry, false, false, false, false},
		{idem.SideEffectDestructive, idem.RetryConvergent, false, true, true, false},
		{idem.SideEffectExternal, idem.RetrySameKeyReplay, false, false, false, true},
	} {
		tl := tool(tc.kind, `{"type":"object"}`)
		tl.SideEffect = tc.effect
		got, err := mcpserver.NewTool(tl)
		if err != nil {
			t.Fatal(err)
		}
		a := got.Annotations
		if a.ReadOnlyHint != tc.readOnly || a.DestructiveHint == nil || *a.DestructiveHint != tc.destructive ||
			a.IdempotentHint != tc.idempotent || a.OpenWorldHint == nil || *a.OpenWorldHint != tc.openWorld {
			t.Errorf("%s/%s: annotations %+v (destructive %v, openWorld %v)", tc.effect, tc.kind, a, a.DestructiveHint, a.OpenWorldHint)
		}
	}
}
