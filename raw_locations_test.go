package idem_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/idem-run/idem"
)

// A raw operation's published input schema marks its path and query
// parameters with x-idem-in, leaves the body's properties and every other
// byte of meaning alone (numbers keep their spelling).
func TestRawInputSchemaSaysWhereArgumentsTravel(t *testing.T) {
	op := idem.DefineRaw(idem.Metadata{
		Name: "getThing", Method: "GET", Path: "/things/{id}", Summary: "Get", SideEffect: idem.SideEffectRead,
		Retry: idem.RetryContract{Kind: idem.RetryFreshRead, Rationale: "r"},
	}, idem.RawSpec{
		Params:      []idem.Param{{Name: "id", In: "path", Type: "string"}, {Name: "q", In: "query", Type: "string"}, {Name: "note", In: "body"}},
		InputSchema: []byte(`{"type":"object","properties":{"id":{"type":"string"},"q":true,"note":{"type":"integer","maximum":9007199254740993}},"required":["id"]}`),
		Handler: func(ctx context.Context, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
			return idem.RawResponse{Status: 200}, nil
		},
	})
	reg, err := idem.NewRegistry(op)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := reg.Describe("getThing")
	if got, want := idem.LocationsFromSchema(d.InputSchema), map[string]string{"id": "path", "q": "query"}; !maps.Equal(got, want) {
		t.Fatalf("locations %v, want %v: %s", got, want, d.InputSchema)
	}
	if !strings.Contains(string(d.InputSchema), `"maximum":9007199254740993`) {
		t.Fatalf("a number lost its spelling: %s", d.InputSchema)
	}
}
