package idem

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPlaceArguments(t *testing.T) {
	locations := map[string]string{"slug": "path", "name": "path", "environment": "query", "limit": "query"}
	args := map[string]json.RawMessage{
		"slug": json.RawMessage(`"acme/corp"`), "name": json.RawMessage(`"api"`), "environment": json.RawMessage(`"preview"`),
		"limit": json.RawMessage(`10`), "originUrl": json.RawMessage(`"https://x"`), "nested": json.RawMessage(`{"a":[1,2]}`),
	}
	p, err := PlaceArguments(locations, args)
	if err != nil {
		t.Fatal(err)
	}
	if p.PathParams["slug"] != "acme/corp" || p.PathParams["name"] != "api" || p.Query.Get("environment") != "preview" || p.Query.Get("limit") != "10" {
		t.Fatalf("placement = %+v", p)
	}
	if string(p.Body) != `{"nested":{"a":[1,2]},"originUrl":"https://x"}` {
		t.Fatalf("body = %s", p.Body)
	}
	if got := FillPath("/v1/businesses/{slug}/backends/{name}", p.PathParams); got != "/v1/businesses/acme%2Fcorp/backends/api" {
		t.Fatalf("FillPath = %s", got)
	}
	if _, err := PlaceArguments(locations, map[string]json.RawMessage{"slug": json.RawMessage(`{"x":1}`)}); ErrorCode(err) != CodeInvalidInput {
		t.Fatalf("an object path argument: %v", err)
	}
	if p, _ := PlaceArguments(nil, map[string]json.RawMessage{}); p.Body != nil {
		t.Fatalf("no arguments gave body %s", p.Body)
	}
}

func TestLocationsFromSchema(t *testing.T) {
	got := LocationsFromSchema(json.RawMessage(`{"properties":{"id":{"type":"string","x-idem-in":"path"},"env":{"x-idem-in":"query"},"amount":{"type":"integer"}}}`))
	if len(got) != 2 || got["id"] != "path" || got["env"] != "query" {
		t.Fatalf("LocationsFromSchema = %v", got)
	}
}

func TestPlaceHeaderArguments(t *testing.T) {
	locations := map[string]string{"tenant": "header:X-Tenant", "priority": "header:X-Priority"}
	p, err := PlaceArguments(locations, map[string]json.RawMessage{"tenant": json.RawMessage(`"acme"`), "priority": json.RawMessage(`3`), "text": json.RawMessage(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Header.Get("X-Tenant") != "acme" || p.Header.Get("x-priority") != "3" || len(p.Header) != 2 || len(p.Query) != 0 {
		t.Fatalf("placement = %+v", p)
	}
	if string(p.Body) != `{"text":"hi"}` {
		t.Fatalf("body = %s", p.Body)
	}
	_, err = PlaceArguments(locations, map[string]json.RawMessage{"tenant": json.RawMessage(`["a"]`)})
	if ErrorCode(err) != CodeInvalidInput || !strings.Contains(err.Error(), "header X-Tenant") {
		t.Fatalf("an array header argument: %v", err)
	}
}

func TestHeaderLocationsFromSchema(t *testing.T) {
	got := LocationsFromSchema(json.RawMessage(`{"properties":{"tenant":{"type":"string","x-idem-in":"header","x-idem-header":"x-tenant"},"bad":{"x-idem-in":"header"}}}`))
	if len(got) != 1 || got["tenant"] != "header:X-Tenant" {
		t.Fatalf("LocationsFromSchema = %v", got)
	}
}
