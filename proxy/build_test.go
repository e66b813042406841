package proxy_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/proxy"
)

// doc30 wraps paths (YAML, indented two spaces) in a minimal OpenAPI 3.0
// document.
func doc30(paths string) string {
	return "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n" + paths
}

// A read both the reconcile rows can name.
const listThings = `  /things:
    get:
      operationId: listThings
      responses: {'200': {description: ok}}
`

func TestBuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doc     string
		overlay string
		// want are substrings of Build's error.
		want []string
	}{
		{
			name: "an operation without operationId",
			doc: doc30(listThings + `  /orphans:
    post:
      summary: No id.
      responses: {'200': {description: ok}}
`),
			want: []string{"POST /orphans", "operationId"},
		},
		{
			name: "a path segment mixing text and a parameter",
			doc: doc30(`  /files/{name}.json:
    get:
      operationId: getFile
      parameters:
        - {name: name, in: path, required: true, schema: {type: string}}
      responses: {'200': {description: ok}}
`),
			want: []string{`"getFile"`, "GET /files/{name}.json", `"{name}.json"`},
		},
		{
			name: "two parameters in one segment",
			doc: doc30(`  /pairs/{a}{b}:
    get:
      operationId: getPair
      parameters:
        - {name: a, in: path, required: true, schema: {type: string}}
        - {name: b, in: path, required: true, schema: {type: string}}
      responses: {'200': {description: ok}}
`),
			want: []string{`"getPair"`, `"{a}{b}"`},
		},
		{
			name:    "an overlay key that is no operationId",
			doc:     doc30(listThings),
			overlay: "createThing:\n  kind: no_automatic_retry\n",
			want:    []string{`"createThing"`, "no operationId"},
		},
		{
			name: "a query parameter and a body property with the same name",
			doc: doc30(listThings + `  /things/{id}:
    post:
      operationId: renameThing
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: name, in: query, schema: {type: string}}
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                name: {type: string}
      responses: {'200': {description: ok}}
`),
			want: []string{`"renameThing"`, "POST /things/{id}", `"name"`, "query", "body"},
		},
		{
			name: "a path parameter and a query parameter with the same name",
			doc: doc30(`  /things/{id}:
    get:
      operationId: getThing
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: id, in: query, schema: {type: string}}
      responses: {'200': {description: ok}}
`),
			want: []string{`"getThing"`, `"id"`, "path", "query"},
		},
		{
			name: "the reserved argument idempotencyKey",
			doc: doc30(`  /things:
    post:
      operationId: createThing
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                idempotencyKey: {type: string}
      responses: {'200': {description: ok}}
`),
			want: []string{`"createThing"`, "POST /things", `"idempotencyKey"`, "reserved"},
		},
		{
			name: "the reserved argument dryRun",
			doc: doc30(`  /things:
    get:
      operationId: listThings
      parameters:
        - {name: dryRun, in: query, schema: {type: boolean}}
      responses: {'200': {description: ok}}
`),
			want: []string{`"listThings"`, `"dryRun"`, "reserved"},
		},
		{
			name: "an x-idem-agent-retry that is a string",
			doc: doc30(`  /things:
    post:
      operationId: createThing
      x-idem-agent-retry: same_key_replay
      responses: {'200': {description: ok}}
`),
			want: []string{`"createThing"`, "POST /things", "x-idem-agent-retry"},
		},
		{
			name: "an x-idem-agent-retry whose kind is a number",
			doc: doc30(`  /things:
    post:
      operationId: createThing
      x-idem-agent-retry: {kind: 5}
      responses: {'200': {description: ok}}
`),
			want: []string{`"createThing"`, "x-idem-agent-retry"},
		},
		{
			name: "an x-idem-agent-retry whose reconcile is an object",
			doc: doc30(`  /things:
    post:
      operationId: createThing
      x-idem-agent-retry: {kind: same_key_replay, reconcile: {name: listThings}}
      responses: {'200': {description: ok}}
`),
			want: []string{`"createThing"`, "x-idem-agent-retry"},
		},
		{
			name: "a schema reference outside the component schemas",
			doc: doc30(`  /things:
    get:
      operationId: listThings
      parameters:
        - name: q
          in: query
          schema: {$ref: '#/components/parameters/Q/schema'}
      responses: {'200': {description: ok}}
components:
  parameters:
    Q:
      name: q
      in: query
      schema: {type: string}
`),
			want: []string{`"listThings"`, "#/components/parameters/Q/schema"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := loadDoc(t, tc.doc)
			overlay, err := proxy.ParseOverlay([]byte(tc.overlay))
			if err != nil {
				t.Fatal(err)
			}
			built, err := proxy.Build(doc, overlay, proxy.Options{Forward: noForward})
			if err == nil {
				t.Fatalf("Build accepted it: %d operations", len(built.Operations))
			}
			if m := missing(err.Error(), tc.want...); len(m) > 0 {
				t.Fatalf("error %q lacks %q", err, m)
			}
		})
	}
}

// TestBuildReportsEveryRefusal: Build names every bad operation at once,
// not only the first.
func TestBuildReportsEveryRefusal(t *testing.T) {
	doc := loadDoc(t, doc30(`  /a:
    get:
      responses: {'200': {description: ok}}
  /b/{x}.txt:
    get:
      operationId: getB
      parameters:
        - {name: x, in: path, required: true, schema: {type: string}}
      responses: {'200': {description: ok}}
`))
	_, err := proxy.Build(doc, proxy.Overlay{"ghost": {Kind: idem.RetryFreshRead}}, proxy.Options{Forward: noForward})
	if err == nil {
		t.Fatal("Build accepted it")
	}
	if m := missing(err.Error(), "GET /a", `"getB"`, `"ghost"`); len(m) > 0 {
		t.Fatalf("error %q lacks %q", err, m)
	}
}

// TestRegistryRefusesBuiltContracts: the rules across operations are
// idem's registration's, on the operations Build declared.
func TestRegistryRefusesBuiltContracts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doc     string
		overlay string
		want    []string
	}{
		{
			name: "reconcile names a writing operation",
			doc: doc30(`  /things:
    post:
      operationId: createThing
      x-idem-agent-retry: {kind: same_key_replay, reconcile: deleteThing, rationale: r}
      responses: {'200': {description: ok}}
    delete:
      operationId: deleteThing
      responses: {'200': {description: ok}}
`),
			want: []string{`"createThing"`, `"deleteThing"`, "not a read"},
		},
		{
			name: "reconcile names a missing operation",
			doc: doc30(listThings + `  /orders:
    post:
      operationId: createOrder
      responses: {'200': {description: ok}}
`),
			overlay: "createOrder: {kind: same_key_replay, reconcile: listOrders, rationale: r}\n",
			want:    []string{`"createOrder"`, `"listOrders"`, "not a registered operation"},
		},
		{
			name: "same_key_replay on a GET",
			doc: doc30(listThings + `  /things/{id}:
    get:
      operationId: getThing
      x-idem-agent-retry: {kind: same_key_replay, reconcile: listThings, rationale: r}
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses: {'200': {description: ok}}
`),
			want: []string{`"getThing"`, "same_key_replay", `"read"`},
		},
		{
			name: "an unknown kind",
			doc: doc30(`  /things:
    post:
      operationId: createThing
      x-idem-agent-retry: {kind: sometimes}
      responses: {'200': {description: ok}}
`),
			want: []string{`"createThing"`, `"sometimes"`},
		},
		{
			name: "an overlay timeout below zero",
			doc: doc30(`  /things:
    post:
      operationId: createThing
      responses: {'200': {description: ok}}
`),
			overlay: "createThing: {kind: no_automatic_retry, rationale: r, timeoutMs: -1}\n",
			want:    []string{`"createThing"`, "negative"},
		},
		{
			name: "an operationId that is no tool name",
			doc: doc30(`  /things:
    get:
      operationId: list things
      responses: {'200': {description: ok}}
`),
			want: []string{`"list things"`},
		},
		{
			name: "two operations with one operationId",
			doc: doc30(`  /a:
    get:
      operationId: getIt
      responses: {'200': {description: ok}}
  /b:
    get:
      operationId: getIt
      responses: {'200': {description: ok}}
`),
			want: []string{`"getIt"`, "twice"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overlay, err := proxy.ParseOverlay([]byte(tc.overlay))
			if err != nil {
				t.Fatal(err)
			}
			built, err := proxy.Build(loadDoc(t, tc.doc), overlay, proxy.Options{Forward: noForward})
			if err != nil {
				// Refusing at Build is fine too, as long as it names
				// the operation and the rule.
				if m := missing(err.Error(), tc.want...); len(m) > 0 {
					t.Fatalf("Build: error %q lacks %q", err, m)
				}
				return
			}
			_, err = idem.NewRegistry(built.Operations...)
			if err == nil {
				t.Fatal("NewRegistry accepted the operations")
			}
			if m := missing(err.Error(), tc.want...); len(m) > 0 {
				t.Fatalf("NewRegistry: error %q lacks %q", err, m)
			}
		})
	}
}

// contractsDoc has one operation per way to get a contract.
const contractsDoc = `openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /things:
    get:
      operationId: listThings
      responses: {'200': {description: ok}}
    head:
      operationId: headThings
      responses: {'200': {description: ok}}
    post:
      operationId: createThing
      x-idem-agent-retry:
        kind: same_key_replay
        reconcile: listThings
        rationale: From the extension.
      responses: {'201': {description: ok}}
    put:
      operationId: replaceThings
      responses: {'200': {description: ok}}
    patch:
      operationId: patchThings
      responses: {'200': {description: ok}}
    delete:
      operationId: deleteThings
      responses: {'204': {description: ok}}
  /orders:
    post:
      operationId: createOrder
      responses: {'201': {description: ok}}
  /approvals:
    post:
      operationId: approveThing
      responses: {'200': {description: ok}}
`

const contractsOverlay = `
createThing:
  kind: no_automatic_retry
  rationale: The overlay loses to the extension.
  timeoutMs: 1500
createOrder:
  kind: same_key_replay
  reconcile: listThings
  rationale: From the overlay.
  timeoutMs: 2500
  approval: always
approveThing:
  kind: intrinsic_replay
  reconcile: listThings
  rationale: The server derives the transition.
  sideEffect: external
`

func TestBuildResolvesContracts(t *testing.T) {
	overlay, err := proxy.ParseOverlay([]byte(contractsOverlay))
	if err != nil {
		t.Fatal(err)
	}
	built, err := proxy.Build(loadDoc(t, contractsDoc), overlay, proxy.Options{Forward: noForward})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idem.NewRegistry(built.Operations...); err != nil {
		t.Fatalf("the built operations do not register: %v", err)
	}
	for _, tc := range []struct {
		name       string
		source     string
		kind       idem.RetryKind
		sideEffect idem.SideEffect
		rationale  string
		timeout    time.Duration
		approval   idem.ApprovalMode
	}{
		{"listThings", "method", idem.RetryFreshRead, idem.SideEffectRead, "", idem.DefaultTimeout, idem.ApprovalNone},
		{"headThings", "method", idem.RetryFreshRead, idem.SideEffectRead, "", idem.DefaultTimeout, idem.ApprovalNone},
		// The extension wins over the overlay's kind; the overlay's
		// timeout still applies.
		{"createThing", "extension", idem.RetrySameKeyReplay, idem.SideEffectWrite, "From the extension.", 1500 * time.Millisecond, idem.ApprovalNone},
		{"createOrder", "overlay", idem.RetrySameKeyReplay, idem.SideEffectWrite, "From the overlay.", 2500 * time.Millisecond, idem.ApprovalAlways},
		{"approveThing", "overlay", idem.RetryIntrinsicReplay, idem.SideEffectExternal, "The server derives the transition.", idem.DefaultTimeout, idem.ApprovalNone},
		{"replaceThings", "method", idem.RetryNoAutomaticRetry, idem.SideEffectWrite, "", idem.DefaultTimeout, idem.ApprovalNone},
		{"patchThings", "method", idem.RetryNoAutomaticRetry, idem.SideEffectWrite, "", idem.DefaultTimeout, idem.ApprovalNone},
		{"deleteThings", "method", idem.RetryNoAutomaticRetry, idem.SideEffectDestructive, "", idem.DefaultTimeout, idem.ApprovalNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metadataOf(t, built, tc.name)
			p := proxiedOf(t, built, tc.name)
			if p.Contract != tc.source || m.Retry.Kind != tc.kind || m.SideEffect != tc.sideEffect {
				t.Errorf("contract from %q, kind %s, side effect %s; want %q, %s, %s", p.Contract, m.Retry.Kind, m.SideEffect, tc.source, tc.kind, tc.sideEffect)
			}
			if tc.rationale != "" && m.Retry.Rationale != tc.rationale {
				t.Errorf("rationale %q, want %q", m.Retry.Rationale, tc.rationale)
			}
			if m.Retry.Rationale == "" {
				t.Error("no rationale")
			}
			if m.Timeout != tc.timeout || m.Approval != tc.approval {
				t.Errorf("timeout %v, approval %s; want %v, %s", m.Timeout, m.Approval, tc.timeout, tc.approval)
			}
			if p.Writes != tc.sideEffect.Writes() {
				t.Errorf("Writes %v for side effect %s", p.Writes, tc.sideEffect)
			}
		})
	}

	t.Run("the warning lists exactly the undeclared writing operations", func(t *testing.T) {
		var found []string
		for _, w := range built.Warnings {
			if !strings.Contains(w, "no declared retry contract") {
				continue
			}
			if found != nil {
				t.Fatalf("two warnings about undeclared contracts: %q", built.Warnings)
			}
			_, list, ok := strings.Cut(w, "no_automatic_retry (keys refused, nothing replayed): ")
			list, _, ok2 := strings.Cut(list, ";")
			if !ok || !ok2 {
				t.Fatalf("warning %q: cannot find its list", w)
			}
			found = strings.Split(list, ", ")
			if !strings.HasPrefix(w, "3 ") {
				t.Errorf("warning %q does not count 3", w)
			}
		}
		slices.Sort(found)
		if want := []string{"deleteThings", "patchThings", "replaceThings"}; !slices.Equal(found, want) {
			t.Fatalf("undeclared %q, want %q (warnings %q)", found, want, built.Warnings)
		}
	})

	t.Run("no warning when every write is declared", func(t *testing.T) {
		b, err := proxy.Build(loadDoc(t, doc30(listThings)), nil, proxy.Options{Forward: noForward})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Warnings) != 0 {
			t.Fatalf("warnings %q", b.Warnings)
		}
	})

	t.Run("the served document carries every contract", func(t *testing.T) {
		var served struct {
			Paths map[string]map[string]struct {
				OperationID string          `json:"operationId"`
				Tags        []string        `json:"tags"`
				Retry       json.RawMessage `json:"x-idem-agent-retry"`
			} `json:"paths"`
		}
		if err := json.Unmarshal(built.Document, &served); err != nil {
			t.Fatalf("served document: %v", err)
		}
		n := 0
		for path, item := range served.Paths {
			for method, op := range item {
				if slices.Contains(op.Tags, "system") {
					if op.Retry != nil {
						t.Errorf("%s %s (%s), a system route, has %s", method, path, op.OperationID, httpapi.AgentRetryExtension)
					}
					continue // idem's own routes, documented as idem serve's
				}
				n++
				if op.Retry == nil {
					t.Errorf("%s %s (%s) has no %s", method, path, op.OperationID, httpapi.AgentRetryExtension)
					continue
				}
				var got idem.RetryContract
				if err := json.Unmarshal(op.Retry, &got); err != nil {
					t.Errorf("%s: %s: %v", op.OperationID, op.Retry, err)
					continue
				}
				want := metadataOf(t, built, op.OperationID).Retry
				if got != want {
					t.Errorf("%s: served %+v, registered %+v", op.OperationID, got, want)
				}
			}
		}
		if n != len(built.Operations) {
			t.Fatalf("the served document has %d operations, Build %d", n, len(built.Operations))
		}
	})
}

func TestParseOverlay(t *testing.T) {
	want := proxy.Overlay{
		"createOrder": {Kind: idem.RetrySameKeyReplay, Reconcile: "listOrders", Rationale: "By key.", TimeoutMs: 5000, Approval: idem.ApprovalPolicy},
		"deleteOrder": {Kind: idem.RetryNoAutomaticRetry, SideEffect: idem.SideEffectDestructive, Preview: true},
	}
	for _, tc := range []struct{ name, text string }{
		{"yaml", `
createOrder:
  kind: same_key_replay
  reconcile: listOrders
  rationale: By key.
  timeoutMs: 5000
  approval: policy
deleteOrder: {kind: no_automatic_retry, sideEffect: destructive, preview: true}
`},
		{"json", `{"createOrder": {"kind": "same_key_replay", "reconcile": "listOrders", "rationale": "By key.", "timeoutMs": 5000, "approval": "policy"},
 "deleteOrder": {"kind": "no_automatic_retry", "sideEffect": "destructive", "preview": true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := proxy.ParseOverlay([]byte(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("got %+v", got)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: got %+v, want %+v", k, got[k], v)
				}
			}
		})
	}
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "", nil},
		{"a comment only", "# nothing declared\n", nil},
		{"empty JSON object", "{}", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := proxy.ParseOverlay([]byte(tc.text))
			if err != nil || len(got) != 0 {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"a misspelt field", "createOrder:\n  kind: same_key_replay\n  reconcle: listOrders\n", []string{`"reconcle"`, "unknown field"}},
		{"a misspelt field in JSON", `{"createOrder": {"kinds": "fresh_read"}}`, []string{`"kinds"`}},
		{"a list", "- createOrder\n", []string{"operationIds"}},
		{"a string entry", "createOrder: same_key_replay\n", []string{"operationIds"}},
		{"a timeout that is text", "createOrder: {kind: fresh_read, timeoutMs: soon}\n", []string{"timeoutMs"}},
		{"not YAML", "createOrder: {kind: [\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := proxy.ParseOverlay([]byte(tc.text))
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if m := missing(err.Error(), tc.want...); len(m) > 0 {
				t.Fatalf("error %q lacks %q", err, m)
			}
		})
	}
}

func TestLoadOverlayFile(t *testing.T) {
	if o, err := proxy.LoadOverlay(""); err != nil || len(o) != 0 {
		t.Fatalf("no file: %+v, %v", o, err)
	}
	if _, err := proxy.LoadOverlay("/nonexistent/contracts.yaml"); err == nil || !strings.Contains(err.Error(), "/nonexistent/contracts.yaml") {
		t.Fatalf("a missing file: %v", err)
	}
}
