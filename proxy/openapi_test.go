package proxy_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/proxy"
)

var update = flag.Bool("update", false, "rewrite testdata/openapi.proxy.json, the served document's snapshot")

// snapshotPath is the document idem proxy serves in front of
// testdata/upstream.json; scripts/openapi-lint.sh lints it.
const snapshotPath = "testdata/openapi.proxy.json"

// fixtureDocument is the document Build serves for testdata/upstream.json.
func fixtureDocument(t *testing.T) []byte {
	t.Helper()
	built, err := proxy.Build(loadFile(t, "testdata/upstream.json"), nil, proxy.Options{Forward: noForward})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idem.NewRegistry(built.Operations...); err != nil {
		t.Fatal(err)
	}
	return built.Document
}

// TestServedDocumentSnapshot keeps testdata/openapi.proxy.json, which
// make test lints with Redocly (scripts/openapi-lint.sh), the document
// this code serves.
func TestServedDocumentSnapshot(t *testing.T) {
	got := fixtureDocument(t)
	if *update {
		if err := os.WriteFile(snapshotPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(snapshotPath)
	if err != nil {
		t.Fatalf("%v (write it with go test ./proxy -run Snapshot -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: review the served document, then go test ./proxy -run Snapshot -update", snapshotPath)
	}
}

type jsonObject = map[string]any

func obj(v any) jsonObject { m, _ := v.(jsonObject); return m }

func str(v any) string { s, _ := v.(string); return s }

// served parses the fixture's served document and finds its operations
// by operationId.
func served(t *testing.T, raw []byte) (jsonObject, map[string]jsonObject) {
	t.Helper()
	var doc jsonObject
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]jsonObject{}
	for _, item := range obj(doc["paths"]) {
		for _, op := range obj(item) {
			if id := str(obj(op)["operationId"]); id != "" {
				ops[id] = obj(op)
			}
		}
	}
	return doc, ops
}

// resolve follows a local $ref of the document.
func resolve(doc jsonObject, v any) jsonObject {
	ref := str(obj(v)["$ref"])
	if ref == "" {
		return obj(v)
	}
	out := any(doc)
	for _, seg := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		out = obj(out)[seg]
	}
	return obj(out)
}

func paramNames(doc, op jsonObject) []string {
	var out []string
	list, _ := op["parameters"].([]any)
	for _, p := range list {
		p := resolve(doc, p)
		out = append(out, str(p["in"])+":"+str(p["name"]))
	}
	return out
}

// TestServedDocumentDescribesTheProxy: the document idem proxy serves
// says what the proxy serves, as idem serve's does (SPEC §10.1, §15):
// idem's bearer security, its server, the control inputs by contract, the
// problems idem answers and the headers it sets, on top of the upstream's
// paths, operationIds, summaries and schemas.
func TestServedDocumentDescribesTheProxy(t *testing.T) {
	doc, ops := served(t, fixtureDocument(t))

	t.Run("security and servers are the proxy's", func(t *testing.T) {
		schemes := obj(obj(doc["components"])["securitySchemes"])
		if b := obj(schemes["bearer"]); str(b["type"]) != "http" || str(b["scheme"]) != "bearer" || len(schemes) != 1 {
			t.Errorf("securitySchemes %v, want idem's bearer only", schemes)
		}
		if s, _ := json.Marshal(doc["security"]); string(s) != `[{"bearer":[]}]` {
			t.Errorf("security %s", s)
		}
		if s, _ := json.Marshal(doc["servers"]); !strings.HasPrefix(string(s), `[{"description":`) || !strings.Contains(string(s), `"url":"/"`) {
			t.Errorf("servers %s, want the proxy's /", s)
		}
		for id, op := range ops {
			if op["security"] != nil && !slices.Contains(tagsOf(op), "system") {
				t.Errorf("%s keeps security %v", id, op["security"])
			}
		}
	})

	t.Run("the upstream's operations, summaries and schemas stay", func(t *testing.T) {
		for _, id := range []string{"listWidgets", "createWidget", "getWidget", "replaceWidget", "deleteWidget", "createNote"} {
			if ops[id] == nil || str(ops[id]["summary"]) == "" {
				t.Errorf("operation %s: %v", id, ops[id])
			}
		}
		schemas := obj(obj(doc["components"])["schemas"])
		for _, name := range []string{"NewWidget", "Widget"} {
			if schemas[name] == nil {
				t.Errorf("schema %s is gone", name)
			}
		}
		if !strings.Contains(str(obj(schemas["Problem"])["description"]), "upstream's own") || schemas["IdemProblem"] == nil {
			t.Errorf("the upstream's Problem %v and idem's IdemProblem %v", schemas["Problem"], schemas["IdemProblem"])
		}
		s, _ := json.Marshal(obj(ops["createWidget"]["responses"])["422"])
		if !strings.Contains(string(s), `"#/components/schemas/IdemProblem"`) {
			t.Errorf("createWidget 422 %s: want idem's problem, renamed", s)
		}
	})

	t.Run("the control inputs follow the contract", func(t *testing.T) {
		for id, want := range map[string][]string{
			"createWidget":  {"header:" + idem.HeaderIdempotencyKey, "header:Prefer"}, // same_key_replay; the upstream's own key parameter is dropped
			"listWidgets":   {"query:limit"},                                          // fresh_read: no key
			"getWidget":     nil,                                                      // the path item's widgetId only
			"replaceWidget": nil,                                                      // convergent: a key is refused
			"deleteWidget":  {"query:" + idem.DryRunParam},                            // a preview
			"createNote":    nil,
		} {
			if got := paramNames(doc, ops[id]); !slices.Equal(got, want) {
				t.Errorf("%s: parameters %q, want %q", id, got, want)
			}
		}
		if got := paramNames(doc, obj(obj(doc["paths"])["/widgets/{widgetId}"])); !slices.Equal(got, []string{"path:widgetId"}) {
			t.Errorf("the path item's parameters %q: want its key parameter dropped", got)
		}
		if p, ok := obj(doc["components"])["parameters"]; ok {
			t.Errorf("the upstream's key parameter, now unused, stays: %v", p)
		}
	})

	t.Run("problems idem answers", func(t *testing.T) {
		for id, want := range map[string]map[string][]idem.Code{
			"createWidget": {
				"400": {idem.CodeInvalidInput, idem.CodeIdempotencyKeyInvalid, idem.CodeIdempotencyKeyRequired, idem.CodeIdempotencyKeyNotSupported},
				"409": {idem.CodeIdempotencyKeyInFlight, idem.CodeIdempotencyResultIndeterminate},
				"422": {idem.CodeIdempotencyKeyReused},
				"413": {idem.CodeRequestTooLarge},
				"429": {idem.CodeRateLimited},
				"500": {idem.CodeExecutionFailed},
				"503": {idem.CodeStoreUnavailable, idem.CodeUpstreamUnavailable},
				"504": {idem.CodeTimeout},
			},
			"listWidgets":   {"400": {idem.CodeInvalidInput, idem.CodeDryRunNotSupported}, "503": {idem.CodeStoreUnavailable}},
			"replaceWidget": {"400": {idem.CodeIdempotencyKeyNotSupported}},
		} {
			responses := obj(ops[id]["responses"])
			for status, codes := range want {
				r := obj(responses[status])
				if obj(obj(r["content"])[idem.ContentTypeProblem]) == nil {
					t.Errorf("%s %s: no problem content: %v", id, status, r)
				}
				for _, c := range codes {
					if !strings.Contains(str(r["description"]), "- "+string(c)+": ") {
						t.Errorf("%s %s does not list %s: %q", id, status, c, r["description"])
					}
				}
			}
			if str(obj(responses["401"])["$ref"]) != "#/components/responses/Unauthenticated" {
				t.Errorf("%s 401: %v", id, responses["401"])
			}
		}
		for _, id := range []string{"listWidgets", "getWidget"} {
			if d := str(obj(obj(ops[id]["responses"])["400"])["description"]); strings.Contains(d, "IDEMPOTENCY_KEY") {
				t.Errorf("%s, a fresh_read, documents key errors: %q", id, d)
			}
		}
		// The upstream's own 409 keeps its body and gains idem's problems.
		r := obj(obj(ops["createWidget"]["responses"])["409"])
		content := obj(r["content"])
		if content["application/json"] == nil || content[idem.ContentTypeProblem] == nil || !strings.HasPrefix(str(r["description"]), "A widget of this name exists.") {
			t.Errorf("createWidget 409 %v", r)
		}
		if obj(obj(r["headers"])[idem.HeaderRetryAfter]) == nil {
			t.Errorf("createWidget 409 has no Retry-After: %v", r["headers"])
		}
	})

	t.Run("the headers idem sets", func(t *testing.T) {
		for id, op := range ops {
			if slices.Contains(tagsOf(op), "system") {
				continue
			}
			keyed := str(obj(op[httpapi.AgentRetryExtension])["kind"]) == string(idem.RetrySameKeyReplay)
			for status, r := range obj(op["responses"]) {
				if status == "401" {
					continue // before any execution: the shared Unauthenticated
				}
				h := obj(resolve(doc, r)["headers"])
				if h[idem.HeaderExecutionID] == nil {
					t.Errorf("%s %s: no %s", id, status, idem.HeaderExecutionID)
				}
				// The upstream's answers of a keyed operation are replayed;
				// idem's own problems never are.
				content := obj(resolve(doc, r)["content"])
				upstreams := content[idem.ContentTypeProblem] == nil || len(content) > 1
				for _, name := range []string{idem.HeaderIdempotentReplayed, idem.HeaderPreferenceApplied} {
					if want := keyed && upstreams; (h[name] != nil) != want {
						t.Errorf("%s %s: %s declared = %v, want %v", id, status, name, !want, want)
					}
				}
			}
		}
		if h := obj(obj(obj(ops["createWidget"]["responses"])["201"])["headers"]); h["Location"] == nil {
			t.Errorf("createWidget 201 lost the upstream's Location: %v", h)
		}
	})

	t.Run("the system routes", func(t *testing.T) {
		for _, id := range []string{"system.operations.list", "system.attempts.show", "system.executions.show"} {
			if ops[id] == nil || ops[id][httpapi.AgentRetryExtension] != nil {
				t.Errorf("%s: %v", id, ops[id])
			}
		}
	})
}

func tagsOf(op jsonObject) []string {
	var out []string
	list, _ := op["tags"].([]any)
	for _, t := range list {
		out = append(out, str(t))
	}
	return out
}

// TestServedDocumentValidates: kin-openapi accepts the served document of
// a 3.1 and of a 3.0 upstream (idem's schemas in 3.0's terms there).
func TestServedDocumentValidates(t *testing.T) {
	for _, path := range []string{"testdata/upstream.json", "testdata/shop30.yaml", "testdata/shop31.json"} {
		t.Run(path, func(t *testing.T) {
			built, err := proxy.Build(loadFile(t, path), nil, proxy.Options{Forward: noForward})
			if err != nil {
				t.Fatal(err)
			}
			doc, err := openapi3.NewLoader().LoadFromData(built.Document)
			if err != nil {
				t.Fatal(err)
			}
			if err := doc.Validate(t.Context()); err != nil {
				t.Fatalf("kin-openapi rejects the served document: %v", err)
			}
			if strings.HasPrefix(doc.OpenAPI, "3.0") && bytes.Contains(built.Document, []byte(`"null"`)) {
				t.Errorf("a 3.0 document with a \"null\" type")
			}
		})
	}
}
