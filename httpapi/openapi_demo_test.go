package httpapi_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
)

// demoSnapshot is the document idem serve --demo serves (its version
// aside); scripts/openapi-lint.sh lints it with Redocly.
const demoSnapshot = "testdata/openapi.demo.json"

// demoDocument is the demo's document as idem serve --demo renders it,
// with a fixed version.
func demoDocument(t *testing.T) []byte {
	t.Helper()
	return httpapi.OpenAPI(demoDescriptors(t), httpapi.OpenAPIInfo{Title: "idem", Version: "snapshot"})
}

// TestOpenAPIDemoSnapshot keeps testdata/openapi.demo.json, which make
// test lints, the document this code serves.
func TestOpenAPIDemoSnapshot(t *testing.T) {
	got := demoDocument(t)
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" { // catalog_test.go's -update
		if err := os.WriteFile(demoSnapshot, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(demoSnapshot)
	if err != nil {
		t.Fatalf("%v (write it with go test ./httpapi -run Snapshot -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: review the document, then go test ./httpapi -run Snapshot -update", demoSnapshot)
	}
}

// demoOperations parses the demo's document: its catalog operations by
// name and its system routes by operationId.
func demoOperations(t *testing.T) (ops, system map[string]map[string]any) {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(demoDocument(t), &doc); err != nil {
		t.Fatal(err)
	}
	ops, system = map[string]map[string]any{}, map[string]map[string]any{}
	for _, item := range doc.Paths {
		for _, op := range item {
			id, _ := op["operationId"].(string)
			if op[httpapi.AgentRetryExtension] == nil {
				system[id] = op
			} else {
				ops[id] = op
			}
		}
	}
	return ops, system
}

func member(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// TestOpenAPIEnvelopeRequiresMeta: an operation's answer always carries
// meta (SPEC §9), so its envelope requires it; a system route's
// {"data": …} does not.
func TestOpenAPIEnvelopeRequiresMeta(t *testing.T) {
	ops, system := demoOperations(t)
	check := func(id string, op map[string]any, want bool) {
		for status, r := range member(op, "responses").(map[string]any) {
			if !strings.HasPrefix(status, "2") {
				continue
			}
			s := member(r, "content", idem.ContentTypeJSON, "schema")
			if member(s, "properties", "data") == nil {
				continue // not enveloped (the catalog, the document)
			}
			required, _ := member(s, "required").([]any)
			if got := slices.Contains(required, any("meta")); got != want {
				t.Errorf("%s %s: meta required = %v, want %v", id, status, got, want)
			}
		}
	}
	for id, op := range ops {
		check(id, op, true)
	}
	for id, op := range system {
		check(id, op, false)
	}
}

// TestOpenAPISuccessHeaders: a 201 declares Location where the
// operation sets it (the demo's business.create), and only there; the
// answers of a same_key_replay operation declare Idempotent-Replayed and
// Preference-Applied.
func TestOpenAPISuccessHeaders(t *testing.T) {
	ops, _ := demoOperations(t)
	n := 0
	for id, op := range ops {
		keyed := member(op, httpapi.AgentRetryExtension, "kind") == string(idem.RetrySameKeyReplay)
		for status, r := range member(op, "responses").(map[string]any) {
			if strings.HasPrefix(status, "2") && member(r, "content", idem.ContentTypeJSON) != nil {
				for _, h := range []string{idem.HeaderIdempotentReplayed, idem.HeaderPreferenceApplied} {
					if (member(r, "headers", h) != nil) != keyed {
						t.Errorf("%s %s: %s declared = %v, keyed = %v", id, status, h, !keyed, keyed)
					}
				}
			}
		}
		for status, r := range member(op, "responses").(map[string]any) {
			has := member(r, "headers", "Location") != nil
			if want := id == "business.create" && status == "201"; has != want {
				t.Errorf("%s %s: Location declared = %v, want %v", id, status, has, want)
			}
			if status == "201" {
				n++
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d operations answer 201: the demo has several", n)
	}
}

// TestOpenAPIServerProblems: every operation documents the 429 and 5xx
// problems idem answers itself, with Retry-After where it is sent.
func TestOpenAPIServerProblems(t *testing.T) {
	ops, _ := demoOperations(t)
	for id, op := range ops {
		for status, codes := range map[string][]idem.Code{
			"429": {idem.CodeRateLimited},
			"500": {idem.CodeExecutionFailed, idem.CodeInternal, idem.CodeOutputInvalid},
			"503": {idem.CodeStoreUnavailable},
			"504": {idem.CodeTimeout},
		} {
			r := member(op, "responses", status)
			desc, _ := member(r, "description").(string)
			for _, c := range codes {
				if !strings.Contains(desc, "- "+string(c)+": ") {
					t.Errorf("%s %s does not list %s: %q", id, status, c, desc)
				}
			}
			if after := member(r, "headers", idem.HeaderRetryAfter) != nil; after != (status == "429" || status == "503") {
				t.Errorf("%s %s: Retry-After declared = %v", id, status, after)
			}
		}
		keyed := member(op, httpapi.AgentRetryExtension, "kind") == string(idem.RetrySameKeyReplay)
		if keyed && member(op, "responses", "409", "headers", idem.HeaderRetryAfter) == nil {
			t.Errorf("%s 409 (IDEMPOTENCY_KEY_IN_FLIGHT) declares no Retry-After", id)
		}
	}
}
