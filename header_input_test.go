package idem_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idem-run/idem"
)

type tenantIn struct {
	Tenant   string `json:"tenant" in:"header" header:"x-tenant"`
	Priority int    `json:"priority,omitempty" in:"header" header:"X-Priority"`
	Text     string `json:"text"`
}

// TestHeaderInputDeclaration: a header input is an argument of the input
// schema (x-idem-in: header, x-idem-header with the canonical name), and
// the descriptor places it under its header.
func TestHeaderInputDeclaration(t *testing.T) {
	op := idem.Define(idem.Metadata{Name: "note.add", Method: "POST", Path: "/v1/notes", Summary: "Add a note", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: "r"}},
		func(ctx context.Context, call *idem.Call, in tenantIn) (tenantIn, error) { return in, nil })
	reg, err := idem.NewRegistry(op)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := reg.Describe("note.add")
	var s struct {
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	if err := json.Unmarshal(d.InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	if p := s.Properties["tenant"]; p["x-idem-in"] != "header" || p["x-idem-header"] != "X-Tenant" || p["type"] != "string" {
		t.Fatalf("tenant in the input schema: %v", p)
	}
	if p := s.Properties["priority"]; p["x-idem-header"] != "X-Priority" || p["type"] != "integer" {
		t.Fatalf("priority in the input schema: %v", p)
	}
	if strings.Join(s.Required, ",") != "tenant,text" {
		t.Fatalf("required = %v", s.Required)
	}
	loc := d.Locations()
	if loc["tenant"] != "header:X-Tenant" || loc["priority"] != "header:X-Priority" || len(loc) != 2 {
		t.Fatalf("Locations = %v", loc)
	}
	if got := idem.LocationsFromSchema(d.InputSchema); got["tenant"] != loc["tenant"] || got["priority"] != loc["priority"] || len(got) != 2 {
		t.Fatalf("LocationsFromSchema = %v, Locations = %v", got, loc)
	}
}

// TestHeaderInputRefusedAtRegistration: reserved headers, a missing name,
// a header tag without in:"header", a header read twice and a non-scalar
// field are refused by NewRegistry, naming the operation.
func TestHeaderInputRefusedAtRegistration(t *testing.T) {
	meta := idem.Metadata{Name: "note.add", Method: "POST", Path: "/v1/notes", Summary: "Add a note", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: "r"}}
	register := func(op idem.Operation) error {
		_, err := idem.NewRegistry(op)
		return err
	}
	rows := []struct {
		name string
		err  error
		want string
	}{
		{"Authorization", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" in:"header" header:"authorization"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), "header Authorization is reserved"},
		{"Idempotency-Key", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" in:"header" header:"IDEMPOTENCY-KEY"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), "header Idempotency-Key is reserved"},
		{"traceparent", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" in:"header" header:"traceparent"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), "header Traceparent is reserved"},
		{"Idem-*", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" in:"header" header:"Idem-Execution-Id"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), "header Idem-Execution-Id is reserved"},
		{"no name", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" in:"header"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), `needs the header's name beside it`},
		{"not a token", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" in:"header" header:"X Tenant"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), `is not a header name`},
		{"header tag alone", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" header:"X-A"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), `needs in:"header" beside it`},
		{"read twice", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A string `json:"a" in:"header" header:"X-A"`
			B string `json:"b" in:"header" header:"x-a"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), `both read header X-A`},
		{"not a scalar", register(idem.Define(meta, func(context.Context, *idem.Call, struct {
			A []string `json:"a" in:"header" header:"X-A"`
		}) (struct{}, error) {
			return struct{}{}, nil
		})), `a header parameter must be a string, number or boolean`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			if row.err == nil || !strings.Contains(row.err.Error(), `idem: operation "note.add"`) || !strings.Contains(row.err.Error(), row.want) {
				t.Fatalf("NewRegistry: %v; want an error naming note.add and %q", row.err, row.want)
			}
		})
	}
	for _, h := range []string{"Prefer", "Content-Type", "content-length", "Host", "Cookie", "Mcp-Session-Id"} {
		if !idem.ReservedHeader(h) {
			t.Errorf("ReservedHeader(%q) = false", h)
		}
	}
	if idem.ReservedHeader("X-Tenant") {
		t.Error("ReservedHeader(X-Tenant) = true")
	}
}
