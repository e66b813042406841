package httpapi

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idem-run/idem"
)

// TestHeaderInputsInOpenAPI: a header input is a parameter in: header
// under its header's name, required as the schema says.
func TestHeaderInputsInOpenAPI(t *testing.T) {
	type noteIn struct {
		Tenant   string `json:"tenant" in:"header" header:"X-Tenant"`
		Priority int    `json:"priority,omitempty" in:"header" header:"x-priority"`
		Text     string `json:"text"`
	}
	add := idem.Define(idem.Metadata{
		Name: "note.add", Method: "POST", Path: "/v1/notes", Summary: "Add a note", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: "r"},
	}, func(ctx context.Context, call *idem.Call, in noteIn) (noteIn, error) { return in, nil })
	raw := OpenAPI(catalogTestRunnerFor(t, add).Descriptors(), catalogTestInfo)
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name     string         `json:"name"`
				In       string         `json:"in"`
				Required bool           `json:"required"`
				Schema   map[string]any `json:"schema"`
			} `json:"parameters"`
			RequestBody struct {
				Content map[string]struct {
					Schema struct {
						Properties map[string]any `json:"properties"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	op := doc.Paths["/v1/notes"]["post"]
	found := map[string]bool{}
	for _, p := range op.Parameters {
		if p.In != "header" {
			continue
		}
		switch p.Name {
		case "X-Tenant":
			found[p.Name] = p.Required && p.Schema["type"] == "string"
		case "X-Priority":
			found[p.Name] = !p.Required && p.Schema["type"] == "integer"
		}
	}
	if !found["X-Tenant"] || !found["X-Priority"] {
		t.Fatalf("header parameters: %+v", op.Parameters)
	}
	body := op.RequestBody.Content["application/json"].Schema.Properties
	if _, ok := body["tenant"]; ok || body["text"] == nil {
		t.Fatalf("body properties %v: header inputs do not travel in the body", body)
	}
	loadOpenAPI(t, raw) // kin-openapi validates it
}
