package mcpserver_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/mcpserver"
)

// TestRemoteBackendSendsOneRequest: a keyed same_key_replay call, which
// the Go client would retry after these answers, is one HTTP request: the
// agent decides retries.
func TestRemoteBackendSendsOneRequest(t *testing.T) {
	f := start(t)
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		code   idem.Code
	}{
		{"connection dropped", func(http.ResponseWriter) { panic(http.ErrAbortHandler) }, idem.CodeNetworkError},
		{"409 in flight", func(w http.ResponseWriter) { idemProblem(w, 409, idem.CodeIdempotencyKeyInFlight) }, idem.CodeIdempotencyKeyInFlight},
		{"503 store unavailable", func(w http.ResponseWriter) { idemProblem(w, 503, idem.CodeStoreUnavailable) }, idem.CodeStoreUnavailable},
		{"502 from a proxy", func(w http.ResponseWriter) {
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		}, idem.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/operations" {
					resp, err := http.Get(f.url + "/v1/operations")
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					_, _ = io.Copy(w, resp.Body)
					return
				}
				calls.Add(1)
				tc.answer(w)
			}))
			t.Cleanup(upstream.Close)
			cs := inMemory(t, mcpserver.NewRemoteBackend(upstream.URL, tokenAgent, nil))
			wantProblem(t, call(t, cs, "gadget.create", map[string]any{"shop": "s1", "name": "a", "idempotencyKey": "one-1"}), tc.code)
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d HTTP requests for one tool call", n)
			}
		})
	}
}

func idemProblem(w http.ResponseWriter, status int, code idem.Code) {
	w.Header().Set("Content-Type", idem.ContentTypeProblem)
	w.Header().Set(idem.HeaderRetryAfter, "1")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"type":"%s%s","title":"t","status":%d,"detail":"d","code":%q,"retryable":true}`, idem.ProblemTypeBase, code, status, code)
}
