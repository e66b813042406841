package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idem-run/idem"
)

var catalogTestInfo = OpenAPIInfo{Title: "idem test", Version: "1.2.3"}

func TestOpenAPIGolden(t *testing.T) {
	descs := catalogTestRunner(t).Descriptors()
	got := OpenAPI(descs, catalogTestInfo)
	catalogGolden(t, "openapi.golden.json", got)

	if again := OpenAPI(catalogTestRunner(t).Descriptors(), catalogTestInfo); !bytes.Equal(again, got) {
		t.Errorf("a second render over a new runner differs")
	}
	reversed := slices.Clone(descs)
	slices.Reverse(reversed)
	if other := OpenAPI(reversed, catalogTestInfo); !bytes.Equal(other, got) {
		t.Errorf("the document depends on the descriptors' order")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, got); err != nil || compact.Len() != len(got)-1 || got[len(got)-1] != '\n' {
		t.Errorf("want compact JSON with one trailing newline (err %v)", err)
	}
}

// loadOpenAPI parses and validates a document with kin-openapi. Validate
// switches to OpenAPI 3.1 rules (JSON Schema 2020-12 schemas, type arrays,
// jsonSchemaDialect, optional responses) by itself when the document says
// openapi: 3.1.x.
func loadOpenAPI(t *testing.T, raw []byte) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("kin-openapi cannot load the document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableSchemaFormatValidation()); err != nil {
		t.Fatalf("kin-openapi rejects the document: %v", err)
	}
	return doc
}

func TestOpenAPIValidates(t *testing.T) {
	loadOpenAPI(t, OpenAPI(catalogTestRunner(t).Descriptors(), catalogTestInfo))
	loadOpenAPI(t, OpenAPI(nil, OpenAPIInfo{}))
}

// TestOpenAPIValidatorIsLive shows that the validation above is not a
// no-op for a 3.1 document: kin-openapi rejects breakages of our document.
func TestOpenAPIValidatorIsLive(t *testing.T) {
	good := string(OpenAPI(catalogTestRunner(t).Descriptors(), catalogTestInfo))
	for _, tc := range []struct{ name, old, new string }{
		{"path parameter not required", `"name":"shop","in":"path","required":true`, `"name":"shop","in":"path","required":false`},
		{"unknown parameter location", `"name":"Prefer","in":"header"`, `"name":"Prefer","in":"body"`},
		{"duplicate operationId", `"operationId":"gadget.list"`, `"operationId":"gadget.create"`},
		{"invalid type in a schema", `"type":"boolean"`, `"type":"flag"`},
		{"dangling $ref", `"$ref":"#/components/schemas/Problem"`, `"$ref":"#/components/schemas/Nope"`},
		// The document uses 3.1 constructs (jsonSchemaDialect, type arrays,
		// const) that kin-openapi accepts only in a 3.1 document.
		{"3.1 constructs in a 3.0 document", `"openapi":"3.1.0"`, `"openapi":"3.0.3"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("document has no %s", tc.old)
			}
			bad := strings.Replace(good, tc.old, tc.new, 1)
			doc, err := openapi3.NewLoader().LoadFromData([]byte(bad))
			if err == nil {
				err = doc.Validate(context.Background())
			}
			if err == nil {
				t.Errorf("kin-openapi accepted a document with %s", tc.name)
			}
		})
	}
}

// catalogRetries maps each operation name to its raw retry object in the
// catalog.
func catalogRetries(t *testing.T, descs []idem.Descriptor) map[string]json.RawMessage {
	t.Helper()
	var cat struct {
		Operations []struct {
			Name  string          `json:"name"`
			Retry json.RawMessage `json:"retry"`
		} `json:"operations"`
	}
	if err := json.Unmarshal(Catalog(descs), &cat); err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, op := range cat.Operations {
		out[op.Name] = op.Retry
	}
	return out
}

func TestOpenAPIOperations(t *testing.T) {
	descs := catalogTestRunner(t).Descriptors()
	raw := OpenAPI(descs, catalogTestInfo)
	doc := loadOpenAPI(t, raw)
	retries := catalogRetries(t, descs)

	seen := map[string]bool{}
	for _, d := range descs {
		item := doc.Paths.Value(d.Path)
		var op *openapi3.Operation
		if item != nil {
			op = item.GetOperation(d.Method)
		}
		if !slices.Contains(d.Surfaces, idem.SurfaceHTTP) {
			if op != nil {
				t.Errorf("%s is not exposed on http but is documented at %s %s", d.Name, d.Method, d.Path)
			}
			continue
		}
		if op == nil {
			t.Errorf("%s: no operation at %s %s", d.Name, d.Method, d.Path)
			continue
		}
		seen[d.Name] = true
		if op.OperationID != d.Name {
			t.Errorf("%s: operationId = %q", d.Name, op.OperationID)
		}
		if op.Summary != d.Summary || !strings.HasPrefix(op.Description, d.Summary) ||
			!strings.Contains(op.Description, d.Retry.Rationale) {
			t.Errorf("%s: summary %q, description %q", d.Name, op.Summary, op.Description)
		}
		if wantReconcile := "Reconcile with " + d.Retry.Reconcile + "."; (d.Retry.Reconcile != "") != strings.Contains(op.Description, wantReconcile) {
			t.Errorf("%s: description %q and reconcile %q", d.Name, op.Description, d.Retry.Reconcile)
		}

		// x-idem-agent-retry is the catalog's retry object: the same value
		// as kin-openapi reads it, and the same bytes in the document.
		ext, ok := op.Extensions[AgentRetryExtension]
		if !ok {
			t.Errorf("%s: no %s", d.Name, AgentRetryExtension)
			continue
		}
		var want any
		if err := json.Unmarshal(retries[d.Name], &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ext, want) {
			t.Errorf("%s: %s = %v, catalog retry = %s", d.Name, AgentRetryExtension, ext, retries[d.Name])
		}
		if !bytes.Contains(raw, []byte(`"`+AgentRetryExtension+`":`+string(retries[d.Name])+`}`)) {
			t.Errorf("%s: %s is not byte for byte the catalog's %s", d.Name, AgentRetryExtension, retries[d.Name])
		}

		keyed := d.Retry.Kind == idem.RetrySameKeyReplay
		// Not required in OpenAPI's sense (browser principals may omit it);
		// the description names the kinds that must send it.
		if p := op.Parameters.GetByInAndName("header", "Idempotency-Key"); (p != nil) != keyed ||
			(p != nil && (p.Required || !strings.HasPrefix(p.Description, "Required from principals of kind agent, cli_session, service_account "))) {
			t.Errorf("%s (%s): Idempotency-Key parameter %+v, want an optional one naming the kinds that must send it, only on same_key_replay", d.Name, d.Retry.Kind, p)
		}
		if p := op.Parameters.GetByInAndName("header", "Prefer"); (p != nil) != keyed || (p != nil && p.Required) {
			t.Errorf("%s (%s): Prefer parameter %+v, want an optional one only on same_key_replay", d.Name, d.Retry.Kind, p)
		}
		p := op.Parameters.GetByInAndName("query", "dryRun")
		if (p != nil) != d.Retry.Preview {
			t.Errorf("%s: dryRun parameter present = %v, retry.preview = %v", d.Name, p != nil, d.Retry.Preview)
		}
		if p != nil && (p.Required || !p.Schema.Value.Type.Is("boolean")) {
			t.Errorf("%s: dryRun must be an optional boolean", d.Name)
		}
		for _, param := range d.Params {
			if param.In == "body" {
				if op.Parameters.GetByInAndName("query", param.Name) != nil {
					t.Errorf("%s: body field %s is a query parameter", d.Name, param.Name)
				}
				continue
			}
			got := op.Parameters.GetByInAndName(param.In, param.Name)
			if got == nil || got.Schema == nil || got.Schema.Value == nil {
				t.Errorf("%s: no %s parameter %s with a schema", d.Name, param.In, param.Name)
			}
		}
		if op.Responses.Status(d.SuccessStatus) == nil || op.Responses.Default() == nil {
			t.Errorf("%s: want the %d success response and a default problem", d.Name, d.SuccessStatus)
		}
	}
	for _, name := range []string{"gadget.bind", "gadget.create", "gadget.list", "session.context_token", "token.list", "token.mint"} {
		if !seen[name] {
			t.Errorf("%s is not documented", name)
		}
	}

	// Every other operation is a system route: tag system, no retry extension.
	var ids []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ids = append(ids, op.OperationID)
			if seen[op.OperationID] {
				continue
			}
			if _, ok := op.Extensions[AgentRetryExtension]; ok {
				t.Errorf("system route %s %s carries %s", method, path, AgentRetryExtension)
			}
			if !slices.Equal(op.Tags, []string{"system"}) || !strings.HasPrefix(op.OperationID, "system.") {
				t.Errorf("system route %s %s: operationId %q, tags %v", method, path, op.OperationID, op.Tags)
			}
			public := op.Security != nil && len(*op.Security) == 0
			wantPublic := slices.Contains([]string{"/v1/operations", "/openapi.json", "/healthz", "/readyz", "/metrics"}, path)
			if public != wantPublic {
				t.Errorf("system route %s %s: public = %v, want %v", method, path, public, wantPublic)
			}
		}
	}
	slices.Sort(ids)
	want := []string{
		"gadget.bind", "gadget.create", "gadget.list", "session.context_token",
		"system.approvals.approve", "system.approvals.list", "system.approvals.reject", "system.approvals.show",
		"system.attempts.show", "system.executions.show", "system.healthz", "system.metrics",
		"system.openapi.show", "system.operations.list", "system.readyz", "token.list", "token.mint",
	}
	if !slices.Equal(ids, want) {
		t.Errorf("operationIds = %v\nwant %v", ids, want)
	}
	if doc.Security == nil || len(doc.Security) != 1 || doc.Components.SecuritySchemes["bearer"].Value.Scheme != "bearer" {
		t.Errorf("want global bearer security")
	}
}

func TestOpenAPIRequestBodies(t *testing.T) {
	doc := loadOpenAPI(t, OpenAPI(catalogTestRunner(t).Descriptors(), catalogTestInfo))
	body := func(path, method string) *openapi3.RequestBody {
		t.Helper()
		rb := doc.Paths.Value(path).GetOperation(method).RequestBody
		if rb == nil {
			return nil
		}
		return rb.Value
	}
	propNames := func(s *openapi3.Schema) []string {
		var names []string
		for name := range s.Properties {
			names = append(names, name)
		}
		slices.Sort(names)
		return names
	}

	create := body("/v1/shops/{shop}/gadgets", "POST")
	if create == nil || !create.Required {
		t.Fatalf("gadget.create: want a required body")
	}
	s := create.Content.Get(idem.ContentTypeJSON).Schema.Value
	if got := propNames(s); !slices.Equal(got, []string{"color", "name"}) {
		t.Errorf("gadget.create body properties = %v, want color, name (no path parameter shop)", got)
	}
	if !slices.Equal(s.Required, []string{"name"}) {
		t.Errorf("gadget.create body required = %v", s.Required)
	}
	if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
		t.Errorf("gadget.create body: want additionalProperties false kept from the input schema")
	}

	bind := body("/v1/shops/{shop}/gadgets/{name}/backend", "PUT")
	if bind == nil || !bind.Required {
		t.Fatalf("gadget.bind: want a required body")
	}
	if got := propNames(bind.Content.Get(idem.ContentTypeJSON).Schema.Value); !slices.Equal(got, []string{"originUrl"}) {
		t.Errorf("gadget.bind body properties = %v", got)
	}
	bindOp := doc.Paths.Value("/v1/shops/{shop}/gadgets/{name}/backend").GetOperation("PUT")
	env := bindOp.Parameters.GetByInAndName("query", "environment")
	if env == nil || !env.Required || len(env.Schema.Value.Enum) != 2 {
		t.Errorf("gadget.bind: environment = %+v, want a required query parameter with the input schema's enum", env)
	}
	if names := []string{bindOp.Parameters[0].Value.Name, bindOp.Parameters[1].Value.Name}; !slices.Equal(names, []string{"shop", "name"}) {
		t.Errorf("gadget.bind: path parameters %v, want route order shop, name", names)
	}

	list := doc.Paths.Value("/v1/shops/{shop}/gadgets").GetOperation("GET")
	color := list.Parameters.GetByInAndName("query", "color")
	if color == nil || color.Required || len(color.Schema.Value.Enum) != 2 {
		t.Errorf("gadget.list: color = %+v, want an optional query parameter with the enum", color)
	}
	if list.RequestBody != nil {
		t.Errorf("gadget.list has a request body")
	}
	if body("/v1/session/context-token", "POST") != nil {
		t.Errorf("session.context_token has no body fields but a request body")
	}
	if body("/v1/tokens", "POST") == nil {
		t.Errorf("token.mint: no request body")
	}

	// The success envelope's data is the output schema.
	resp := doc.Paths.Value("/v1/tokens").GetOperation("POST").Responses.Status(201).Value
	data := resp.Content.Get(idem.ContentTypeJSON).Schema.Value.Properties["data"].Value
	if got := propNames(data); !slices.Equal(got, []string{"id", "name", "secret"}) {
		t.Errorf("token.mint data properties = %v", got)
	}
	if resp.Headers[idem.HeaderIdempotentReplayed] == nil {
		t.Errorf("token.mint: the success response does not document %s", idem.HeaderIdempotentReplayed)
	}
	conflict := doc.Paths.Value("/v1/shops/{shop}/gadgets").GetOperation("POST").Responses.Status(409)
	if conflict == nil || !strings.Contains(*conflict.Value.Description, "GADGET_EXISTS") ||
		conflict.Value.Content.Get(idem.ContentTypeProblem) == nil {
		t.Errorf("gadget.create: want the declared 409 GADGET_EXISTS as a problem response")
	}
}

// TestOpenAPIComponentsDescribeTheWire validates real wire objects against
// the component schemas, with kin-openapi's JSON Schema 2020-12 validator,
// and checks that every property of the Go type is described.
func TestOpenAPIComponentsDescribeTheWire(t *testing.T) {
	descs := catalogTestRunner(t).Descriptors()
	doc := loadOpenAPI(t, OpenAPI(descs, catalogTestInfo))
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	by, reason, exe, code := "bob", "fine", "exe_1", idem.CodeTimeout
	status := 201
	mint, _ := catalogTestRunner(t).Describe("token.mint")
	problem := idem.NewProblem(idem.Errorf(idem.CodeIdempotencyKeyReused, "reused"), &idem.Meta{
		Operation: "gadget.create", ExecutionID: "exe_1", Attempts: 1,
		Idempotency: &idem.IdempotencyMeta{Key: "k1", Replayed: true},
	})
	problem.Details = map[string]any{"reconcile": "gadget.list"}
	for _, tc := range []struct {
		schema string
		value  any
		// full is true when value sets every field, so its keys must be the
		// schema's properties.
		full bool
	}{
		{"Approval", idem.Approval{ID: "apr_1", Operation: "gadget.create", Status: idem.ApprovalPending, CreatedAt: now, ExpiresAt: now}, false},
		{"Approval", idem.Approval{
			ID: "apr_1", Operation: "gadget.create", Status: idem.ApprovalConsumed, RequestedBy: "agent-1", Reason: "big",
			DecidedBy: &by, DecisionReason: &reason, Fingerprint: "fp", Input: json.RawMessage(`{"a":1}`),
			CreatedAt: now, ExpiresAt: now, DecidedAt: &now, ConsumedAt: &now, ExecutionID: &exe, Rule: "big-refunds",
		}, true},
		{"Execution", idem.Execution{ID: "exe_1", Outcome: idem.OutcomeRunning, StartedAt: now, Events: []idem.AuditEvent{}}, false},
		{"Execution", idem.Execution{
			ID: "exe_2", Operation: "gadget.create", Principal: "agent-1", Attempts: 2, Outcome: idem.OutcomeFailed,
			Code: &code, ReinvocationOf: &exe, StartedAt: now, FinishedAt: &now,
			Events: []idem.AuditEvent{{Type: idem.EventRetried, At: now, Attempt: 2, PreviousErrorCode: idem.CodeTimeout, Data: map[string]string{"x": "y"}}},
		}, true},
		{"AuditEvent", idem.AuditEvent{Type: idem.EventFailed, At: now, Attempt: 1, Code: code, PreviousErrorCode: code, Attempts: 2, DurationMs: 5, Data: map[string]string{"a": "b"}}, true},
		{"AttemptRecord", idem.AttemptView{Key: "k1", Operation: "gadget.create", State: idem.AttemptInFlight, CreatedAt: now, ExpiresAt: now}, false},
		{"AttemptRecord", idem.AttemptView{
			Key: "k1", Operation: "token.mint", State: idem.AttemptCompleted, Fingerprint: "fp", ExecutionID: "exe_1",
			Status: &status, CreatedAt: now, CompletedAt: &now, ExpiresAt: now, SecretExpiresAt: &now,
		}, true},
		{"Problem", problem, true},
		{"Envelope", idem.Envelope{Data: json.RawMessage(`{"status":"ok"}`), Meta: problem.Meta}, true},
		{"Meta", idem.Meta{Operation: "x.y", ExecutionID: "exe_1", Attempts: 1, DryRun: true, Idempotency: &idem.IdempotencyMeta{Key: "k"}}, true},
		{"Catalog", json.RawMessage(Catalog(descs)), true},
		{"RetryContract", mint.Retry, true}, // with secretReplayWindowMs
	} {
		raw, err := json.Marshal(tc.value)
		if err != nil {
			t.Fatal(err)
		}
		var value any
		if err := json.Unmarshal(raw, &value); err != nil {
			t.Fatal(err)
		}
		ref := doc.Components.Schemas[tc.schema]
		if tc.schema == "Envelope" { // the success body, as every route describes it
			ref = doc.Paths.Value("/healthz").Get.Responses.Status(200).Value.Content.Get(idem.ContentTypeJSON).Schema
		}
		if ref == nil {
			t.Fatalf("no component schema %s", tc.schema)
		}
		if err := ref.Value.VisitJSON(value, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s does not describe %s: %v", tc.schema, raw, err)
		}
		if tc.full {
			var keys []string
			for k := range value.(map[string]any) {
				keys = append(keys, k)
			}
			var props []string
			for k := range ref.Value.Properties {
				props = append(props, k)
			}
			slices.Sort(keys)
			slices.Sort(props)
			if !slices.Equal(keys, props) {
				t.Errorf("%s: the wire object has %v, the schema describes %v", tc.schema, keys, props)
			}
		}
	}
}

// TestOpenAPISystemIDCollision: a catalog operation that takes a system
// operationId keeps it; the system route's becomes idem:system.….
func TestOpenAPISystemIDCollision(t *testing.T) {
	r := catalogTestRunnerFor(t, idem.Define(idem.Metadata{
		Name: "system.healthz", Method: "GET", Path: "/v1/system/health",
		Summary: "An application's own health read.", SideEffect: idem.SideEffectRead,
	}, func(ctx context.Context, call *idem.Call, in struct{}) (catNotes, error) {
		return catNotes{}, nil
	}))
	doc := loadOpenAPI(t, OpenAPI(r.Descriptors(), catalogTestInfo))
	if got := doc.Paths.Value("/v1/system/health").Get.OperationID; got != "system.healthz" {
		t.Errorf("catalog operation's operationId = %q", got)
	}
	if got := doc.Paths.Value("/healthz").Get.OperationID; got != "idem:system.healthz" {
		t.Errorf("system route's operationId = %q, want idem:system.healthz", got)
	}
}
