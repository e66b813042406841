package proxy_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/proxy"
)

// input is one call of a schema row.
type input struct {
	path  map[string]string
	query url.Values
	body  string
	// contentType is the body's media type; "" sends none.
	contentType string
}

// validationCase expects a call to pass (paths nil) or to be refused
// with 400 INVALID_INPUT naming exactly paths in details.errors.
type validationCase struct {
	name  string
	in    input
	paths []string
}

// runValidation calls op with each row, with a fresh key for writing
// operations, and checks what reached the upstream.
func runValidation(t *testing.T, r *pipeline.Runner, rec *recorder, op string, keyed bool, cases []validationCase) {
	t.Helper()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.calls(op))
			req := idem.Invocation{
				Operation: op,
				Surface:   idem.SurfaceHTTP,
				Principal: agent,
				Intent:    idem.Intent{PathParams: tc.in.path, Query: tc.in.query, Body: []byte(tc.in.body)},
			}
			if tc.in.contentType != "" {
				req.Intent.ContentType, req.Intent.Passthrough = tc.in.contentType, http.Header{"Content-Type": {tc.in.contentType}}
			}
			if keyed {
				req.Key = fmt.Sprintf("k-%s-%d", op, i)
			}
			res := r.Call(t.Context(), req)
			reached := len(rec.calls(op)) - before
			if tc.paths == nil {
				if res.Status != 200 || reached != 1 {
					t.Fatalf("answered %d %s; %d calls reached the upstream, want 200 and 1", res.Status, res.Body(), reached)
				}
				return
			}
			p := problemOf(t, res)
			if res.Status != 400 || p.Code != idem.CodeInvalidInput {
				t.Fatalf("answered %d %s, want 400 INVALID_INPUT", res.Status, res.Body())
			}
			if got := p.errorPaths(); !slices.Equal(got, tc.paths) {
				t.Fatalf("details.errors paths %q, want %q (%s)", got, tc.paths, res.Body())
			}
			if reached != 0 {
				t.Fatalf("an invalid call reached the upstream")
			}
		})
	}
}

func TestOpenAPI30Schemas(t *testing.T) {
	r, built, rec := buildRunner(t, loadFile(t, "testdata/shop30.yaml"), nil)
	shop := map[string]string{"shop": "acme"}
	t.Run("listWidgets", func(t *testing.T) {
		runValidation(t, r, rec, "listWidgets", false, []validationCase{
			{name: "no limit", in: input{path: shop}},
			{name: "limit 1", in: input{path: shop, query: url.Values{"limit": {"1"}}}},
			{name: "limit 100", in: input{path: shop, query: url.Values{"limit": {"100"}}}},
			// 0 is excluded by the boolean exclusiveMinimum.
			{name: "limit 0", in: input{path: shop, query: url.Values{"limit": {"0"}}}, paths: []string{"/limit"}},
			{name: "limit 101", in: input{path: shop, query: url.Values{"limit": {"101"}}}, paths: []string{"/limit"}},
			{name: "limit not an integer", in: input{path: shop, query: url.Values{"limit": {"2.5"}}}, paths: []string{"/limit"}},
			{name: "limit text", in: input{path: shop, query: url.Values{"limit": {"ten"}}}, paths: []string{"/limit"}},
			{name: "limit twice", in: input{path: shop, query: url.Values{"limit": {"1", "2"}}}, paths: []string{"/limit"}},
			{name: "an undeclared query parameter", in: input{path: shop, query: url.Values{"offset": {"1"}}}, paths: []string{"/offset"}},
			// The path item's parameter applies to its operations.
			{name: "shop too short", in: input{path: map[string]string{"shop": "a"}}, paths: []string{"/shop"}},
		})
	})
	t.Run("createWidget", func(t *testing.T) {
		body := func(s string) input { return input{path: shop, body: s} }
		runValidation(t, r, rec, "createWidget", true, []validationCase{
			{name: "minimal", in: body(`{"name":"anvil","price":1.5}`)},
			{name: "nullable null", in: body(`{"name":"anvil","price":1,"colour":null,"note":null}`)},
			{name: "nullable enum value", in: body(`{"name":"anvil","price":1,"colour":"red","note":"fragile"}`)},
			{name: "recursive reference", in: body(`{"name":"anvil","price":1,"size":{"width":2,"inner":{"width":1}}}`)},
			{name: "JSON media type with parameters", in: input{path: shop, body: `{"name":"anvil","price":1}`, contentType: "application/json; charset=utf-8"}},
			{name: "price 0 is excluded", in: body(`{"name":"anvil","price":0}`), paths: []string{"/price"}},
			{name: "missing price", in: body(`{"name":"anvil"}`), paths: []string{""}},
			{name: "no body", in: input{path: shop}, paths: []string{"", ""}},
			{name: "colour outside the enum", in: body(`{"name":"anvil","price":1,"colour":"green"}`), paths: []string{"/colour"}},
			{name: "note not a string", in: body(`{"name":"anvil","price":1,"note":5}`), paths: []string{"/note"}},
			{name: "name null is not nullable", in: body(`{"name":null,"price":1}`), paths: []string{"/name"}},
			{name: "additionalProperties false", in: body(`{"name":"anvil","price":1,"weight":3}`), paths: []string{""}},
			{name: "through the reference", in: body(`{"name":"anvil","price":1,"size":{"width":0}}`), paths: []string{"/size/width"}},
			{name: "through the recursion", in: body(`{"name":"anvil","price":1,"size":{"width":1,"inner":{}}}`), paths: []string{"/size/inner"}},
			{name: "a body that is an array", in: body(`[1]`), paths: []string{""}},
			{name: "a path parameter in the body", in: body(`{"name":"anvil","price":1,"shop":"other"}`), paths: []string{"/shop"}},
			{name: "a JSON object sent as text", in: input{path: shop, body: `{"name":"anvil","price":1}`, contentType: "text/plain"}, paths: []string{""}},
		})
	})
	t.Run("bodies that are not JSON objects are forwarded unvalidated", func(t *testing.T) {
		for _, op := range []string{"setTags", "createNote"} {
			n := 0
			for _, w := range built.Warnings {
				if strings.Contains(w, fmt.Sprintf("%q", op)) && strings.Contains(w, "without validation") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d warnings about %s's validation: %q", n, op, built.Warnings)
			}
		}
		res := r.Call(t.Context(), idem.Invocation{
			Operation: "setTags",
			Principal: agent,
			Intent:    idem.Intent{Body: []byte(`["a","b"]`), Query: url.Values{"anything": {"goes"}}},
		})
		if res.Status != 200 {
			t.Fatalf("setTags: %d %s", res.Status, res.Body())
		}
		got := rec.calls("setTags")
		if len(got) != 1 || string(got[0].Body) != `["a","b"]` || got[0].Query.Get("anything") != "goes" {
			t.Fatalf("setTags forwarded %+v", got)
		}
		res = r.Call(t.Context(), idem.Invocation{
			Operation: "createNote",
			Principal: agent,
			Intent:    idem.Intent{Body: []byte("hello, world"), ContentType: "text/plain", Passthrough: http.Header{"Content-Type": {"text/plain"}}},
		})
		if res.Status != 200 {
			t.Fatalf("createNote: %d %s", res.Status, res.Body())
		}
		if got := rec.calls("createNote"); len(got) != 1 || string(got[0].Body) != "hello, world" {
			t.Fatalf("createNote forwarded %+v", got)
		}
	})
	t.Run("no warning for the validated operations", func(t *testing.T) {
		for _, w := range built.Warnings {
			if strings.Contains(w, `"listWidgets"`) || strings.Contains(w, `"createWidget"`) {
				t.Errorf("warning %q", w)
			}
		}
	})
}

func TestOpenAPI31Schemas(t *testing.T) {
	r, _, rec := buildRunner(t, loadFile(t, "testdata/shop31.json"), proxy.Overlay{
		"updateWidget": {Kind: idem.RetryNoAutomaticRetry, Rationale: "A patch."},
	})
	path := map[string]string{"shop": "acme", "id": "7"}
	patch := func(s string) input {
		return input{path: path, body: s, contentType: "application/merge-patch+json"}
	}
	runValidation(t, r, rec, "updateWidget", false, []validationCase{
		{name: "minimal", in: patch(`{"name":"anvil"}`)},
		{name: "type list with null: null", in: patch(`{"name":"anvil","note":null}`)},
		{name: "type list with null: a string", in: patch(`{"name":"anvil","note":"fragile"}`)},
		{name: "const", in: patch(`{"name":"anvil","status":"active"}`)},
		{name: "numeric exclusiveMinimum", in: patch(`{"name":"anvil","price":0.01}`)},
		{name: "recursive reference with a sibling", in: patch(`{"name":"anvil","size":{"width":1,"inner":{"width":2}}}`)},
		{name: "boolean query", in: input{path: path, body: `{"name":"anvil"}`, query: url.Values{"notify": {"true"}}}},
		{name: "type list with null: a number", in: patch(`{"name":"anvil","note":5}`), paths: []string{"/note"}},
		{name: "type list with null: too long", in: patch(`{"name":"anvil","note":"far too long a note"}`), paths: []string{"/note"}},
		{name: "const violated", in: patch(`{"name":"anvil","status":"retired"}`), paths: []string{"/status"}},
		{name: "numeric exclusiveMinimum violated", in: patch(`{"name":"anvil","price":0}`), paths: []string{"/price"}},
		{name: "through the reference", in: patch(`{"name":"anvil","size":{"width":1,"inner":{"width":0}}}`), paths: []string{"/size/inner/width"}},
		{name: "integer path parameter", in: input{path: map[string]string{"shop": "acme", "id": "seven"}, body: `{"name":"anvil"}`}, paths: []string{"/id"}},
		{name: "integer path parameter minimum", in: input{path: map[string]string{"shop": "acme", "id": "0"}, body: `{"name":"anvil"}`}, paths: []string{"/id"}},
		{name: "path parameter pattern", in: input{path: map[string]string{"shop": "ACME", "id": "7"}, body: `{"name":"anvil"}`}, paths: []string{"/shop"}},
		{name: "boolean query not a boolean", in: input{path: path, body: `{"name":"anvil"}`, query: url.Values{"notify": {"yes"}}}, paths: []string{"/notify"}},
		{name: "additionalProperties false", in: patch(`{"name":"anvil","colour":"red"}`), paths: []string{""}},
		{name: "a required property missing", in: patch(`{"note":null}`), paths: []string{""}},
	})
	t.Run("the upstream gets the route filled and the body as sent", func(t *testing.T) {
		got := rec.calls("updateWidget")
		if len(got) == 0 {
			t.Fatal("no call reached the upstream")
		}
		first := got[0]
		if first.Method != "PATCH" || first.Path != "/shops/acme/widgets/7" || string(first.Body) != `{"name":"anvil"}` ||
			first.Header.Get("Content-Type") != "application/merge-patch+json" {
			t.Fatalf("the upstream got %+v", first)
		}
	})
}

// TestFlatInputSchema checks the published schema's shape: path and query
// parameters and body properties at the top level, required from the
// path, the parameters and the body, components under $defs.
func TestFlatInputSchema(t *testing.T) {
	r, _, _ := buildRunner(t, loadFile(t, "testdata/shop30.yaml"), nil)
	d, ok := r.Describe("createWidget")
	if !ok {
		t.Fatal("no createWidget")
	}
	s := string(d.InputSchema)
	if m := missing(s, `"shop"`, `"name"`, `"price"`, `"$defs"`, `"Size"`, `"#/$defs/Size"`, `"additionalProperties":false`); len(m) > 0 {
		t.Fatalf("input schema %s lacks %q", s, m)
	}
	for _, bad := range []string{"nullable", "#/components/", `"example"`} {
		if strings.Contains(s, bad) {
			t.Errorf("input schema %s still has %s", s, bad)
		}
	}
	var ins []string
	for _, p := range d.Params {
		ins = append(ins, p.Name+":"+p.In)
	}
	slices.Sort(ins)
	want := []string{"colour:body", "name:body", "note:body", "price:body", "shop:path", "size:body"}
	if !slices.Equal(ins, want) {
		t.Fatalf("params %q, want %q", ins, want)
	}
	l, _ := r.Describe("listWidgets")
	for _, p := range l.Params {
		if p.Name == "limit" && (p.In != "query" || p.Type != "integer") {
			t.Fatalf("limit is %+v", p)
		}
	}
	if m := missing(string(l.OutputSchema), `"array"`, `"#/$defs/Widget"`); len(m) > 0 {
		t.Fatalf("listWidgets output schema %s lacks %q", l.OutputSchema, m)
	}
}

// TestUnvalidatedOption: --validate=false forwards what the schema
// refuses, and warns about nothing.
func TestUnvalidatedOption(t *testing.T) {
	rec := &recorder{}
	built, err := proxy.Build(loadFile(t, "testdata/shop30.yaml"), nil, proxy.Options{Forward: rec.forward, Unvalidated: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range built.Warnings {
		if strings.Contains(w, "without validation") {
			t.Errorf("warning %q with validation off", w)
		}
	}
	r := newRunner(t, built.Operations)
	res := r.Call(t.Context(), idem.Invocation{
		Operation: "createWidget",
		Principal: agent,
		Key:       "k-1",
		Intent:    idem.Intent{PathParams: map[string]string{"shop": "a"}, Body: []byte(`{"price":-1,"weight":3}`)},
	})
	if res.Status != 200 || len(rec.calls("createWidget")) != 1 {
		t.Fatalf("unvalidated: %d %s", res.Status, res.Body())
	}
	// An integer the fingerprint cannot keep exactly is refused, not
	// forwarded under the fingerprint of a rounded one (issue 28, item 8):
	// 2^53+1 and 2^53 would be one intent.
	res = r.Call(t.Context(), idem.Invocation{
		Operation: "createWidget",
		Principal: agent,
		Key:       "k-big",
		Intent:    idem.Intent{PathParams: map[string]string{"shop": "a"}, Body: []byte(`{"price":9007199254740993,"weight":3}`)},
	})
	if p := problemOf(t, res); res.Status != 400 || p.Code != idem.CodeInvalidInput || len(rec.calls("createWidget")) != 1 ||
		len(p.errorPaths()) != 1 || p.errorPaths()[0] != "/price" {
		t.Fatalf("2^53+1 unvalidated: %d %s (%d upstream calls)", res.Status, res.Body(), len(rec.calls("createWidget")))
	}
}

// A body schema that is an allOf of an object, or an object through a
// reference, are common; the reference case is validated.
func TestBodyThroughReferenceIsValidated(t *testing.T) {
	_, built, _ := buildRunner(t, loadFile(t, "testdata/shop30.yaml"), nil)
	for _, w := range built.Warnings {
		if strings.Contains(w, `"createWidget"`) {
			t.Fatalf("createWidget (a $ref body) is not validated: %q", w)
		}
	}
}
