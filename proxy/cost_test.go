package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// enumDoc is an OpenAPI 3.1 document whose createThing takes a body
// {code, color}: code a component enum of codes values, color an inline
// enum of colors values, and whose listThings answers with a code.
func enumDoc(codes, colors int) []byte {
	enum := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%07d", prefix, i)
		}
		return out
	}
	doc := map[string]any{
		"openapi": "3.1.0", "info": map[string]any{"title": "enums", "version": "1"},
		"paths": map[string]any{"/things": map[string]any{
			"post": map[string]any{"operationId": "createThing",
				"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{
					"type": "object", "required": []string{"code"},
					"properties": map[string]any{
						"code":  map[string]any{"$ref": "#/components/schemas/Code"},
						"color": map[string]any{"type": "string", "enum": enum("k", colors)},
					}}}}},
				"responses": map[string]any{"201": map[string]any{"description": "created"}}},
			"get": map[string]any{"operationId": "listThings",
				"responses": map[string]any{"200": map[string]any{"description": "the things", "content": map[string]any{"application/json": map[string]any{
					"schema": map[string]any{"type": "object", "properties": map[string]any{"code": map[string]any{"$ref": "#/components/schemas/Code"}}}}}}}},
		}},
		"components": map[string]any{"schemas": map[string]any{"Code": map[string]any{"type": "string", "enum": enum("c", codes)}}},
	}
	b, _ := json.Marshal(doc)
	return b
}

// loadBytes loads a generated document.
func loadBytes(t testing.TB, data []byte) *proxy.Document {
	t.Helper()
	path := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	doc, err := proxy.Load(t.Context(), path, nil, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return doc
}

// TestLongEnumIsLeftOut: a red team's document with an enum of 1.3
// million values took 1.2 GiB at start, and every call was checked
// against the whole list. An enum of more than MaxEnum values is now left
// out of the schemas idem validates and publishes, with a start-up
// warning naming the operations and the JSON path; the upstream checks
// it. One of MaxEnum values is kept and checked.
func TestLongEnumIsLeftOut(t *testing.T) {
	const long = 200_000
	doc := loadBytes(t, enumDoc(long, proxy.MaxEnum))
	r, built, rec := buildRunner(t, doc, nil)

	var warned []string
	for _, w := range built.Warnings {
		if strings.Contains(w, "enum") {
			warned = append(warned, w)
		}
	}
	want := []string{
		"operation listThings: the enum of the answer schema at /$defs/Code/enum (200000 values) has more than 1000 values",
		"operation createThing: the enum of the input schema at /$defs/Code/enum (200000 values) has more than 1000 values: idem does not check it",
	}
	if len(warned) != len(want) {
		t.Fatalf("enum warnings = %q, want %d", warned, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(warned[i], w) {
			t.Errorf("warning %d = %q, want it to start %q", i, warned[i], w)
		}
	}

	// The published schemas do not grow with the enum: what a call is
	// checked against, the catalog and MCP publish, is the same size
	// for 200,000 values as for 2,000.
	small, _ := r.Describe("createThing")
	doc2 := loadBytes(t, enumDoc(2*proxy.MaxEnum, proxy.MaxEnum))
	r2, _, _ := buildRunner(t, doc2, nil)
	small2, _ := r2.Describe("createThing")
	if len(small.InputSchema) != len(small2.InputSchema) {
		t.Errorf("input schema: %d bytes with %d values, %d with %d: it grows with the enum", len(small.InputSchema), long, len(small2.InputSchema), 2*proxy.MaxEnum)
	}
	if strings.Contains(string(small.InputSchema), "c0000001") {
		t.Errorf("the input schema keeps the long enum")
	}
	if !strings.Contains(string(small.InputSchema), `"k0000999"`) {
		t.Errorf("the input schema lost the enum of %d values: %.300s", proxy.MaxEnum, small.InputSchema)
	}
	if list, _ := r.Describe("listThings"); strings.Contains(string(list.OutputSchema), "c0000001") {
		t.Errorf("the answer schema keeps the long enum")
	}

	// Off the long enum: forwarded (the upstream checks it). Off the
	// kept one: refused.
	call := func(body string) idem.Result {
		return r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
			Intent: idem.Intent{Body: []byte(body)}})
	}
	if res := call(`{"code":"not-a-code"}`); res.Status != http.StatusOK || len(rec.calls("createThing")) != 1 {
		t.Errorf("off the long enum: %d %s, forwarded %d times; want it forwarded", res.Status, res.Body(), len(rec.calls("createThing")))
	}
	if res := call(`{"code":"c0000001","color":"not-a-color"}`); res.Status != http.StatusBadRequest {
		t.Errorf("off the enum of %d values: %d %s, want 400", proxy.MaxEnum, res.Status, res.Body())
	} else if p := problemOf(t, res); strings.Join(p.errorPaths(), ",") != "/color" {
		t.Errorf("off the enum of %d values: errors at %v, want /color", proxy.MaxEnum, p.errorPaths())
	}
}

// opsDoc is an OpenAPI 3.1 document of n operations (n/2 paths, a GET
// and a POST each) that all reach the component Thing, whose description
// is pad bytes long.
func opsDoc(n, pad int) []byte {
	paths := map[string]any{}
	thing := map[string]any{"$ref": "#/components/schemas/Thing"}
	answer := map[string]any{"description": "it", "content": map[string]any{"application/json": map[string]any{"schema": thing}}}
	for i := range n / 2 {
		id := map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}
		paths[fmt.Sprintf("/r%d/{id}", i)] = map[string]any{
			"get": map[string]any{"operationId": fmt.Sprintf("get%d", i), "parameters": []any{id},
				"responses": map[string]any{"200": answer}},
			"post": map[string]any{"operationId": fmt.Sprintf("post%d", i), "parameters": []any{id},
				"x-idem-agent-retry": map[string]any{"kind": "same_key_replay", "reconcile": fmt.Sprintf("get%d", i), "rationale": "replays"},
				"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{
					"type": "object", "required": []string{"thing"},
					"properties": map[string]any{"thing": thing, "note": map[string]any{"type": "string", "maxLength": 200}}}}}},
				"responses": map[string]any{"201": answer}},
		}
	}
	doc := map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "many", "version": "1"}, "paths": paths,
		"components": map[string]any{"schemas": map[string]any{
			"Thing": map[string]any{"type": "object", "description": strings.Repeat("x", pad), "required": []string{"name"},
				"properties": map[string]any{"name": map[string]any{"type": "string", "minLength": 1}, "size": map[string]any{"type": "integer", "minimum": 0},
					"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}, "owner": map[string]any{"$ref": "#/components/schemas/Owner"}}},
			"Owner": map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}, "email": map[string]any{"type": "string", "format": "email"}}},
		}}}
	b, _ := json.Marshal(doc)
	return b
}

// TestDocumentCostIsBounded: a red team's document of 10,000 operations
// took 627 MiB. A document of more than MaxOperations operations, or
// whose operations' schemas add up to more than MaxSchemaBytes (a large
// component reached by every operation is copied into each), refuses the
// start with what to do, before any validator is compiled.
func TestDocumentCostIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  []byte
		want []string
	}{
		{"operations", opsDoc(proxy.MaxOperations+2, 0),
			[]string{"declares 5002 operations, more than 5000", "serve the API through several proxies"}},
		// 64 operations each reach Thing, of 1 MiB: 64 MiB of schemas
		// from a document of 1 MiB.
		{"schema bytes", opsDoc(64, 1<<20),
			[]string{"add up to more than 32 MiB", "KiB): have fewer", "have fewer operations reach large components"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := proxy.Build(loadBytes(t, tc.doc), nil, proxy.Options{Forward: noForward})
			if err == nil {
				t.Fatal("built")
			}
			if m := missing(err.Error(), tc.want...); len(m) > 0 {
				t.Errorf("error %q lacks %q", err, m)
			}
		})
	}
}

// BenchmarkProxyDeclarations reports what a proxied operation holds once
// declared and registered (the heap it keeps, in bytes per operation),
// for a document of 1,000 operations like opsDoc's.
func BenchmarkProxyDeclarations(b *testing.B) {
	const n = 1000
	doc := loadBytes(b, opsDoc(n, 0))
	var kept float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		built, err := proxy.Build(doc, nil, proxy.Options{Forward: noForward})
		if err != nil {
			b.Fatal(err)
		}
		reg, err := idem.NewRegistry(built.Operations...)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(reg)
		runtime.KeepAlive(built)
	}
	b.ReportMetric(kept, "heap-B/operation")
}

// BenchmarkLongEnumCall reports a validated call's cost with an enum of
// 1,000 values (checked) and of 100,000 and 1,000,000 (left out): it must
// not grow with the enum.
func BenchmarkLongEnumCall(b *testing.B) {
	for _, n := range []int{proxy.MaxEnum, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("values=%d", n), func(b *testing.B) {
			r, _, _ := buildRunner(b, loadBytes(b, enumDoc(n, 10)), nil)
			inv := idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
				Intent: idem.Intent{Body: []byte(fmt.Sprintf(`{"code":"c%07d"}`, n-1))}}
			b.ReportAllocs()
			for b.Loop() {
				if res := r.Call(b.Context(), inv); res.Status != http.StatusOK {
					b.Fatalf("%d %s", res.Status, res.Body())
				}
			}
		})
	}
}

// TestWarningsDoNotGrowWithTheDocument: the warning about writing
// operations without a declared contract named every one of them (2,500
// names on one log line for opsDoc's 5,000 operations). It names 50 and
// counts the rest.
func TestWarningsDoNotGrowWithTheDocument(t *testing.T) {
	paths := map[string]any{}
	for i := range 60 {
		paths[fmt.Sprintf("/w%02d", i)] = map[string]any{"post": map[string]any{"operationId": fmt.Sprintf("write%02d", i),
			"responses": map[string]any{"201": map[string]any{"description": "done"}}}}
	}
	data, _ := json.Marshal(map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "w", "version": "1"}, "paths": paths})
	built, err := proxy.Build(loadBytes(t, data), nil, proxy.Options{Forward: noForward})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range built.Warnings {
		if !strings.HasPrefix(w, "60 writing operations have no declared retry contract") {
			continue
		}
		if n := strings.Count(w, "write"); n != 50 {
			t.Errorf("the warning names %d operations, want 50: %q", n, w)
		}
		if !strings.Contains(w, " and 10 more; declare one") {
			t.Errorf("the warning does not count the rest: %q", w)
		}
		return
	}
	t.Fatalf("no warning about the undeclared operations: %q", built.Warnings)
}
