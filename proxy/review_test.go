package proxy_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// Fixes of the review of the proxy package: a strict extension, a
// declared read on POST, safe methods, undeclared route parameters.

func TestExtensionIsStrict(t *testing.T) {
	doc := loadDoc(t, doc30(listThings+`  /orders:
    post:
      operationId: createOrder
      x-idem-agent-retry: {kind: same_key_replay, reconcile: listThings, rationale: r, previw: true}
      responses: {'201': {description: ok}}
`))
	_, err := proxy.Build(doc, nil, proxy.Options{Forward: noForward})
	if err == nil || !strings.Contains(err.Error(), `"createOrder"`) || !strings.Contains(err.Error(), `unknown member "previw"`) {
		t.Fatalf("Build: %v, want the misspelt member named", err)
	}
}

func TestDeclaredReadOnPostAndSafeMethods(t *testing.T) {
	doc := loadDoc(t, doc30(`  /search:
    post:
      operationId: search
      x-idem-agent-retry: {kind: fresh_read, rationale: A search reads.}
      responses: {'200': {description: ok}}
    options:
      operationId: searchOptions
      responses: {'200': {description: ok}}
`))
	r, built, _ := buildRunner(t, doc, nil)
	for _, w := range built.Warnings {
		if strings.Contains(w, "search") {
			t.Errorf("warning about a declared or safe operation: %s", w)
		}
	}
	for _, name := range []string{"search", "searchOptions"} {
		d, ok := r.Describe(name)
		if !ok || d.SideEffect != idem.SideEffectRead || d.Retry.Kind != idem.RetryFreshRead {
			t.Errorf("%s: side effect %q, kind %q; want read, fresh_read", name, d.SideEffect, d.Retry.Kind)
		}
	}
}

func TestUndeclaredRouteParameterIsAString(t *testing.T) {
	doc := loadDoc(t, doc30(`  /things/{thingId}:
    get:
      operationId: getThing
      responses: {'200': {description: ok}}
`))
	r, _, rec := buildRunner(t, doc, nil)
	res := r.Call(t.Context(), idem.Invocation{Operation: "getThing", Principal: agent, Intent: idem.Intent{PathParams: map[string]string{"thingId": "t1"}}})
	if res.Status != 200 || len(rec.calls("getThing")) != 1 {
		t.Fatalf("getThing answered %d %s", res.Status, res.Body())
	}
}

// The catalog's input schema of a proxied operation says where each
// argument travels (x-idem-in), as a typed operation's does, so that the
// clients that place flat arguments (idem call, idem mcp --server, the Go
// client) send a path parameter in the path and a query parameter in the
// query (issue 26, item 1): declared, undeclared, $ref'd and schemaless.
func TestCatalogSaysWhereProxiedArgumentsTravel(t *testing.T) {
	doc := loadDoc(t, doc30(`  /shops/{shop}/widgets/{id}:
    parameters:
      - {name: shop, in: path, required: true, schema: {$ref: '#/components/schemas/Slug'}}
    get:
      operationId: getWidget
      parameters:
        - {name: verbose, in: query, schema: {type: boolean}}
        - {name: page, in: query}
        - {name: X-Trace, in: header, schema: {type: string}}
      responses: {'200': {description: ok}}
    put:
      operationId: putWidget
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {'200': {description: ok}}
components:
  schemas:
    Slug: {type: string, maxLength: 64}
`))
	r, _, _ := buildRunner(t, doc, nil)
	for name, want := range map[string]map[string]string{
		"getWidget": {"shop": "path", "id": "path", "verbose": "query", "page": "query", "X-Trace": "header:X-Trace"},
		"putWidget": {"shop": "path", "id": "path"},
	} {
		d, ok := r.Describe(name)
		if !ok {
			t.Fatalf("%s not declared", name)
		}
		if got := idem.LocationsFromSchema(d.InputSchema); !maps.Equal(got, want) {
			t.Errorf("%s: locations from the catalog %v, want %v (schema %s)", name, got, want, d.InputSchema)
		}
	}
}
