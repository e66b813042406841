package proxy_test

import (
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
