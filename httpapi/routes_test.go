package httpapi_test

import (
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
)

func TestCheckRoutes(t *testing.T) {
	d := func(name, path string) idem.Descriptor {
		return idem.Descriptor{Metadata: idem.Metadata{Name: name, Method: "GET", Path: path}}
	}
	for _, c := range []struct {
		name  string
		descs []idem.Descriptor
		want  string // "" when accepted
	}{
		{"distinct routes", []idem.Descriptor{d("a", "/widgets"), d("b", "/widgets/{id}"), d("c", "/widgets/{id}/parts")}, ""},
		{"a parameter name ServeMux refuses", []idem.Descriptor{d("a", "/widgets/{widget-id}")}, ""},
		{"a system route", []idem.Descriptor{d("health", "/healthz")}, `operation "health": GET /healthz is one of idem's own routes`},
		{"a system route by pattern", []idem.Descriptor{d("exe", "/v1/executions/{x}")}, `"exe"`},
		{"under a reserved subtree", []idem.Descriptor{d("ui", "/ui/pages")}, `"ui"`},
		{"a reserved path", []idem.Descriptor{d("mcp", "/mcp")}, `"mcp"`},
		{"two routes ServeMux cannot order", []idem.Descriptor{d("a", "/{x}/parts"), d("b", "/widgets/{y}")}, `operation "b"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := httpapi.CheckRoutes(c.descs, "/mcp", "/mcp/", "/ui/")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}
