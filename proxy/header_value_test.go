package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// TestHeaderParameterWithCRLFIsInvalidInput: a proxied header parameter
// holding CR or LF (or another control character) is 400 INVALID_INPUT
// naming the argument, on MCP and through the HTTP surface's Runner alike,
// as a NUL is, and nothing reaches the upstream (issue 33 item 8). Before,
// net/http refused to send it and the caller got 503 UPSTREAM_UNAVAILABLE,
// retryable.
func TestHeaderParameterWithCRLFIsInvalidInput(t *testing.T) {
	up := newUpstream(t, nil)
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, headerDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	for _, surface := range []idem.Surface{idem.SurfaceMCP, idem.SurfaceHTTP} {
		for name, value := range map[string]string{"CR": "acme\rX-Evil: 1", "LF": "acme\nX-Evil: 1", "CRLF": "acme\r\nX-Evil: 1",
			"NUL": "acme\x00", "DEL": "acme\x7f", "ESC": "acme\x1b"} {
			res := r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: surface, Principal: agent, Key: "k-" + name,
				Intent: idem.Intent{Header: http.Header{"X-Tenant": {value}}, ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
			p := problemOf(t, res)
			if res.Status != 400 || p.Code != idem.CodeInvalidInput || !strings.Contains(string(res.Body()), "X-Tenant") {
				t.Fatalf("%s, %s in X-Tenant: %d %s; want 400 INVALID_INPUT naming X-Tenant", surface, name, res.Status, res.Body())
			}
		}
	}
	if n := up.count.Load(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
	// A tab is a field value's character.
	res := r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceMCP, Principal: agent, Key: "k-tab",
		Intent: idem.Intent{Header: http.Header{"X-Tenant": {"ac\tme"}}, ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
	if res.Status >= 400 {
		t.Fatalf("a tab in X-Tenant: %d %s", res.Status, res.Body())
	}
}
