package proxy_test

import (
	"net/http"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// Issue 34 item 7: an upstream's plain 404 (text/plain, no declared
// response) is the upstream's answer, not an internal error.
func TestUpstreamPlain404IsItsAnswer(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	for _, key := range []string{"k-404", "k-404"} {
		res := r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
			Key: key, Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
		if res.Status != 404 || string(res.Body()) != "404 page not found\n" {
			t.Fatalf("key %q: %d %s", key, res.Status, res.Body())
		}
	}
}
