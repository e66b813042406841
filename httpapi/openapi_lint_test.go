package httpapi_test

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/secretbox"
)

// demoDescriptors are the descriptors of the reference application, as
// idem serve --demo registers them.
func demoDescriptors(t *testing.T) []idem.Descriptor {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	app, err := demo.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "demo.db"), demo.Config{Sealer: box, HTTPClient: &http.Client{Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	reg, err := idem.NewRegistry(app.Operations()...)
	if err != nil {
		t.Fatal(err)
	}
	var out []idem.Descriptor
	for _, name := range reg.Names() {
		d, _ := reg.Describe(name)
		out = append(out, d)
	}
	return out
}

// TestOpenAPIPassesTheLintRules checks, without npm, what Redocly's
// recommended rules found missing in the documents idem serve renders,
// with and without --demo, and idem proxy's (make test runs the real
// linter, scripts/openapi-lint.sh):
// servers, a license, a description on every tag, a 4xx response on every
// operation, no unused component, and on every same_key_replay route the
// key errors as responses a generated client can model.
func TestOpenAPIPassesTheLintRules(t *testing.T) {
	for name, descs := range map[string][]idem.Descriptor{"demo": demoDescriptors(t), "no operations": nil} {
		t.Run(name, func(t *testing.T) {
			var doc map[string]any
			if err := json.Unmarshal(httpapi.OpenAPI(descs, httpapi.OpenAPIInfo{Version: "test"}), &doc); err != nil {
				t.Fatal(err)
			}
			lintOpenAPI(t, doc)
		})
	}
	t.Run("idem proxy", func(t *testing.T) {
		up, err := proxy.Load(t.Context(), "../proxy/testdata/upstream.json", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		built, err := proxy.Build(up, nil, proxy.Options{Forward: func(proxy.Operation) idem.RawHandler { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(built.Document, &doc); err != nil {
			t.Fatal(err)
		}
		lintOpenAPI(t, doc)
	})
}

var status4xx = regexp.MustCompile(`^4[0-9Xx]{2}$`)

func lintOpenAPI(t *testing.T, doc map[string]any) {
	t.Helper()
	obj := func(v any) map[string]any { m, _ := v.(map[string]any); return m }
	str := func(v any) string { s, _ := v.(string); return s }

	servers, _ := doc["servers"].([]any)
	if len(servers) == 0 {
		t.Error("no servers (no-empty-servers)")
	}
	for _, s := range servers {
		u := str(obj(s)["url"])
		if u == "" || (strings.HasSuffix(u, "/") && u != "/") || strings.Contains(u, "example.com") {
			t.Errorf("server url %q", u)
		}
	}
	if l := obj(obj(doc["info"])["license"]); str(l["name"]) == "" || (l["identifier"] == nil) == (l["url"] == nil) {
		t.Errorf("info.license %v: want a name and one of identifier, url (info-license, info-license-strict)", l)
	}
	declared := map[string]bool{}
	for _, tag := range doc["tags"].([]any) {
		declared[str(obj(tag)["name"])] = true
		if str(obj(tag)["description"]) == "" {
			t.Errorf("tag %q has no description (tag-description)", obj(tag)["name"])
		}
	}

	ids := map[string]bool{}
	for path, item := range obj(doc["paths"]) {
		for method, v := range obj(item) {
			if !slices.Contains([]string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}, method) {
				continue // the path item's parameters, summary, …
			}
			op := obj(v)
			where := strings.ToUpper(method) + " " + path
			id := str(op["operationId"])
			if id == "" || ids[id] || str(op["summary"]) == "" {
				t.Errorf("%s: operationId %q (unique, non-empty) and summary %q", where, id, op["summary"])
			}
			ids[id] = true
			for _, tag := range op["tags"].([]any) {
				if !declared[str(tag)] {
					t.Errorf("%s: tag %q is not declared", where, tag)
				}
			}
			responses := obj(op["responses"])
			if !slices.ContainsFunc(mapKeys(responses), status4xx.MatchString) {
				t.Errorf("%s: no 4xx response (operation-4xx-response)", where)
			}
			if !slices.ContainsFunc(mapKeys(responses), func(k string) bool { return strings.HasPrefix(k, "2") }) {
				t.Errorf("%s: no 2xx response", where)
			}
			secured := op["security"] == nil // the global bearer requirement applies
			if _, ok := responses["401"]; ok != secured {
				t.Errorf("%s: 401 documented = %v, bearer required = %v", where, ok, secured)
			}
			retry := obj(op["x-idem-agent-retry"])
			if str(retry["kind"]) != string(idem.RetrySameKeyReplay) {
				continue
			}
			want := map[string][]idem.Code{
				"400": {idem.CodeIdempotencyKeyInvalid, idem.CodeIdempotencyKeyRequired, idem.CodeIdempotencyKeyNotSupported, idem.CodeInvalidInput},
				"409": {idem.CodeIdempotencyKeyInFlight, idem.CodeIdempotencyResultIndeterminate},
				"422": {idem.CodeIdempotencyKeyReused},
			}
			if str(retry["enforcement"]) == string(idem.EnforceTransactionalSecretReplay) {
				want["410"] = []idem.Code{idem.CodeIdempotencyResultExpired}
			}
			for status, codes := range want {
				r := obj(responses[status])
				desc := str(r["description"])
				if obj(obj(r["content"])[idem.ContentTypeProblem]) == nil {
					t.Errorf("%s: no %s problem response", where, status)
				}
				for _, c := range codes {
					if !strings.Contains(desc, "- "+string(c)+": ") {
						t.Errorf("%s: the %s response does not list %s: %q", where, status, c, desc)
					}
				}
			}
			var key map[string]any
			for _, p := range op["parameters"].([]any) {
				if str(obj(p)["name"]) == "Idempotency-Key" {
					key = obj(p)
				}
			}
			if key == nil || key["required"] != false || !strings.Contains(str(key["description"]), "agent, cli_session, service_account") {
				t.Errorf("%s: Idempotency-Key %v, want optional with the kinds that must send it", where, key)
			}
		}
	}

	// Every component is referenced (no-unused-components), every
	// reference resolves.
	raw, _ := json.Marshal(doc)
	refs := map[string]bool{}
	for _, m := range regexp.MustCompile(`"\$ref":"(#/components/[^"]+)"`).FindAllStringSubmatch(string(raw), -1) {
		refs[m[1]] = true
	}
	components := obj(doc["components"])
	for kind, group := range components {
		for name := range obj(group) {
			ref := "#/components/" + kind + "/" + name
			if kind == "securitySchemes" {
				continue // used by the security requirements
			}
			if !refs[ref] {
				t.Errorf("component %s is never used", ref)
			}
			delete(refs, ref)
		}
	}
	for ref := range refs {
		t.Errorf("%s does not resolve", ref)
	}
}

func mapKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
