package proxy_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// TestUpstreamNotRunAnswersFreeTheKey: an upstream 429, or a 503 with
// Retry-After, says the request was not run: the caller gets that answer
// with its Retry-After, nothing is stored, and the same key runs again
// later (issue 28, Low). A 503 without Retry-After stays indeterminate.
func TestUpstreamNotRunAnswersFreeTheKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter string
		freed      bool
	}{
		{"429 with Retry-After", 429, "7", true},
		{"429 without Retry-After", 429, "", true},
		{"503 with Retry-After", 503, "3", true},
		{"503 without Retry-After", 503, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first atomic.Bool
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if first.CompareAndSwap(false, true) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(`{"error":"busy"}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(201)
				_, _ = w.Write([]byte(`{"id":"t1"}`))
			})
			f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
			built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler})
			if err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, built.Operations)
			call := func() idem.Result {
				return r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
					Key: "k-busy", Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
			}
			res := call()
			if res.Status != tc.status || string(res.Body()) != `{"error":"busy"}` || res.Header.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("first call: %d %s Retry-After %q, want the upstream's %d with Retry-After %q", res.Status, res.Body(), res.Header.Get("Retry-After"), tc.status, tc.retryAfter)
			}
			again := call()
			if !tc.freed {
				if again.Status != 409 || problemOf(t, again).Code != idem.CodeIdempotencyResultIndeterminate || up.count.Load() != 1 {
					t.Fatalf("same key after a 503 without Retry-After: %d %s (upstream calls %d), want indeterminate", again.Status, again.Body(), up.count.Load())
				}
				return
			}
			if again.Status != 201 || again.Replayed || up.count.Load() != 2 {
				t.Fatalf("same key after the upstream's %d: %d %s replayed=%v, upstream calls %d; want a new execution", tc.status, again.Status, again.Body(), again.Replayed, up.count.Load())
			}
			if replay := call(); !replay.Replayed || replay.Status != 201 || up.count.Load() != 2 {
				t.Fatalf("a third call: %d replayed=%v, upstream calls %d", replay.Status, replay.Replayed, up.count.Load())
			}
		})
	}
}
