package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// testCatalog is a catalog with one operation per retry contract kind.
const testCatalog = `{"operations":[
{"name":"agreement.preview","method":"POST","path":"/v1/agreements/preview","summary":"s","sideEffect":"none","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},
 "retry":{"kind":"preview","keyRequired":false,"enforcement":"none","responseSemantics":"preview","reconcile":null,"rationale":"r","preview":true},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{"terms":{"type":"object"}}},"outputSchema":{}},
{"name":"auth.context_token","method":"POST","path":"/v1/auth/context-token","summary":"s","sideEffect":"write","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},
 "retry":{"kind":"no_automatic_retry","keyRequired":false,"enforcement":"none","responseSemantics":"point_in_time","reconcile":null,"rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{}},"outputSchema":{}},
{"name":"backend.bind","method":"PUT","path":"/v1/businesses/{slug}/backends/{name}","summary":"s","sideEffect":"write","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},
 "retry":{"kind":"convergent","keyRequired":false,"enforcement":"resource_identity","responseSemantics":"current_state","reconcile":"backend.list","rationale":"r","preview":true},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{"slug":{"type":"string","x-idem-in":"path"},"name":{"type":"string","x-idem-in":"path"},"environment":{"type":"string","x-idem-in":"query"},"originUrl":{"type":"string"}}},"outputSchema":{}},
{"name":"order.refund","method":"POST","path":"/v1/orders/{id}/refund","summary":"s","sideEffect":"write","idempotent":true,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":1,"backoffMs":250},
 "retry":{"kind":"same_key_replay","keyRequired":true,"enforcement":"idempotency_reservation","responseSemantics":"original_attempt_result","reconcile":"order.show","rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{"id":{"type":"string","x-idem-in":"path"},"amount":{"type":"integer"}}},"outputSchema":{}},
{"name":"order.show","method":"GET","path":"/v1/orders/{id}","summary":"s","sideEffect":"read","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},
 "retry":{"kind":"fresh_read","keyRequired":false,"enforcement":"fresh_read","responseSemantics":"current_state","reconcile":null,"rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{"id":{"type":"string","x-idem-in":"path"}}},"outputSchema":{}},
{"name":"serviceaccount.approve","method":"POST","path":"/v1/service-accounts/{id}/approve","summary":"s","sideEffect":"write","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},
 "retry":{"kind":"intrinsic_replay","keyRequired":false,"enforcement":"server_derived_transition","responseSemantics":"current_state","reconcile":"serviceaccount.show","rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{"id":{"type":"string","x-idem-in":"path"}}},"outputSchema":{}}
],"directCliOperations":[]}
`

// seen is one request the scripted server received.
type seen struct {
	method, path, rawPath, query, key, prefer, auth string
	body                                            string
}

// script answers the n-th (1-based) operation request; it may hijack the
// connection to drop it.
type script func(n int, w http.ResponseWriter, r *http.Request)

// scripted is an httptest server that serves testCatalog and answers every
// other request with its script.
type scripted struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seen
	catalogs int
}

func newScripted(t *testing.T, s script) *scripted {
	t.Helper()
	sc := &scripted{}
	sc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/operations" {
			sc.mu.Lock()
			sc.catalogs++
			sc.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, testCatalog)
			return
		}
		body, _ := io.ReadAll(r.Body)
		sc.mu.Lock()
		sc.requests = append(sc.requests, seen{
			method: r.Method, path: r.URL.Path, rawPath: r.URL.EscapedPath(), query: r.URL.RawQuery,
			key: r.Header.Get("Idempotency-Key"), prefer: r.Header.Get("Prefer"), auth: r.Header.Get("Authorization"), body: string(body),
		})
		n := len(sc.requests)
		sc.mu.Unlock()
		s(n, w, r)
	}))
	t.Cleanup(sc.Close)
	return sc
}

func (sc *scripted) catalogReads() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.catalogs
}

func (sc *scripted) seen() []seen {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return append([]seen(nil), sc.requests...)
}

func (sc *scripted) client(t *testing.T, opts ...Option) *Client {
	t.Helper()
	c, err := New(sc.URL, "tok", append([]Option{WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// drop closes the connection without an answer, after reading the request.
func drop(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func envelope(w http.ResponseWriter, status int, key string, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"data":{"ok":true},"meta":{"operation":"order.refund","executionId":"exe_1","attempts":1,"idempotency":{"key":%q,"replayed":%t}}}`, key, replayed)
}

func problem(w http.ResponseWriter, status int, code idem.Code, retryable bool, details string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	if details == "" {
		details = "{}"
	}
	fmt.Fprintf(w, `{"type":"urn:idem:error:%s","title":"t","status":%d,"detail":"d","code":%q,"retryable":%t,"details":%s}`, code, status, code, retryable, details)
}

func refundArgs() map[string]json.RawMessage {
	return map[string]json.RawMessage{"id": json.RawMessage(`"ord_1"`), "amount": json.RawMessage(`100`)}
}

// sameKeyAndBody fails unless every request carried key and one body.
func sameKeyAndBody(t *testing.T, reqs []seen, key string) {
	t.Helper()
	for i, r := range reqs {
		if r.key != key || r.body != reqs[0].body || r.path != reqs[0].path || r.method != reqs[0].method {
			t.Fatalf("request %d = %+v, want key %s and the first request's method, path and body %+v", i+1, r, key, reqs[0])
		}
	}
}

func TestCallSameKeyReplayRetries(t *testing.T) {
	tests := []struct {
		name  string
		first func(w http.ResponseWriter)
	}{
		{"connection dropped after the request", drop},
		{"409 in flight", func(w http.ResponseWriter) {
			problem(w, 409, idem.CodeIdempotencyKeyInFlight, true, "")
		}},
		{"503 store unavailable", func(w http.ResponseWriter) {
			problem(w, 503, idem.CodeStoreUnavailable, true, "")
		}},
		{"502 from a proxy", func(w http.ResponseWriter) {
			w.WriteHeader(502)
			io.WriteString(w, "<html>bad gateway</html>")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					tt.first(w)
					return
				}
				envelope(w, 200, r.Header.Get("Idempotency-Key"), true)
			})
			res, err := sc.client(t).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-1"})
			if err != nil {
				t.Fatal(err)
			}
			reqs := sc.seen()
			if len(reqs) != 2 || res.Requests != 2 || !res.Replayed() || res.Status != 200 {
				t.Fatalf("requests %d (result says %d), replayed %v", len(reqs), res.Requests, res.Replayed())
			}
			sameKeyAndBody(t, reqs, "k-1")
			if reqs[0].prefer != "" || reqs[1].prefer != "wait=10" {
				t.Fatalf("Prefer headers = %q, %q; want none, then wait=10", reqs[0].prefer, reqs[1].prefer)
			}
			if reqs[0].path != "/v1/orders/ord_1/refund" || reqs[0].body != `{"amount":100}` || reqs[0].auth != "Bearer tok" {
				t.Fatalf("request = %+v", reqs[0])
			}
		})
	}
}

func TestCallRequestTimeoutRetriesSameKey(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		envelope(w, 200, r.Header.Get("Idempotency-Key"), true)
	})
	res, err := sc.client(t, WithRequestTimeout(200*time.Millisecond)).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-t"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed() || res.Requests != 2 {
		t.Fatalf("result after a timeout: requests %d, replayed %v", res.Requests, res.Replayed())
	}
	sameKeyAndBody(t, sc.seen(), "k-t")
}

func TestCallStopsOnIndeterminate(t *testing.T) {
	for _, code := range []idem.Code{idem.CodeIdempotencyResultIndeterminate, idem.CodeIdempotencyResultExpired, idem.CodeIdempotencyKeyReused, idem.CodeApprovalRequired} {
		t.Run(string(code), func(t *testing.T) {
			status := code.Info().Status
			sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
				problem(w, status, code, false, `{"reconcile":"order.show","approvalId":"apr_1"}`)
			})
			_, err := sc.client(t).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-i"})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if len(sc.seen()) != 1 || e.Requests != 1 {
				t.Fatalf("%s was retried: %d requests", code, len(sc.seen()))
			}
			if e.Code != code || e.Status != status || e.Retryable || e.Reconcile() != "order.show" || e.IdempotencyKey != "k-i" || e.Local {
				t.Fatalf("error = %+v", e)
			}
			if !strings.Contains(string(e.Problem), `"code":"`+string(code)+`"`) {
				t.Fatalf("problem = %s", e.Problem)
			}
			if !errors.Is(err, idem.Errorf(code, "")) {
				t.Fatal("errors.Is does not match the code")
			}
		})
	}
}

func TestCallFirst5xxStops(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
		problem(w, 500, idem.CodeExecutionFailed, false, `{"reconcile":"order.show"}`)
	})
	_, err := sc.client(t).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-5"})
	var e *Error
	if !errors.As(err, &e) || e.Code != idem.CodeExecutionFailed || len(sc.seen()) != 1 {
		t.Fatalf("err = %v after %d requests", err, len(sc.seen()))
	}
}

func TestCallNeverRetriedKinds(t *testing.T) {
	tests := []struct {
		name string
		op   string
		args map[string]json.RawMessage
		opts CallOptions
	}{
		{"convergent", "backend.bind", map[string]json.RawMessage{"slug": json.RawMessage(`"a"`), "name": json.RawMessage(`"api"`), "environment": json.RawMessage(`"preview"`), "originUrl": json.RawMessage(`"https://x"`)}, CallOptions{}},
		{"convergent dry run", "backend.bind", map[string]json.RawMessage{"slug": json.RawMessage(`"a"`), "name": json.RawMessage(`"api"`)}, CallOptions{DryRun: true}},
		{"no_automatic_retry", "auth.context_token", nil, CallOptions{}},
		{"intrinsic_replay", "serviceaccount.approve", map[string]json.RawMessage{"id": json.RawMessage(`"sa_1"`)}, CallOptions{}},
		{"preview", "agreement.preview", map[string]json.RawMessage{"terms": json.RawMessage(`{"plan":"x"}`)}, CallOptions{}},
		{"same_key_replay without a key", "order.refund", refundArgs(), CallOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, fail := range []func(http.ResponseWriter){drop, func(w http.ResponseWriter) { problem(w, 503, idem.CodeStoreUnavailable, true, "") }} {
				sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { fail(w) })
				_, err := sc.client(t).Call(context.Background(), tt.op, tt.args, tt.opts)
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("err = %v", err)
				}
				if n := len(sc.seen()); n != 1 {
					t.Fatalf("%s was retried: %d requests", tt.op, n)
				}
				if e.Code == idem.CodeNetworkError && (e.Status != 0 || !e.Local || !e.Retryable || !strings.Contains(string(e.Problem), `"status":0`)) {
					t.Fatalf("network error = %+v %s", e, e.Problem)
				}
			}
		})
	}
}

func TestCallFreshReadRetries(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			drop(w)
		case 2:
			problem(w, 500, idem.CodeInternal, false, "")
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"data":{"id":"ord_1"},"meta":{"operation":"order.show"}}`)
		}
	})
	res, err := sc.client(t).Call(context.Background(), "order.show", map[string]json.RawMessage{"id": json.RawMessage(`"ord_1"`)}, CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := sc.seen()
	if len(reqs) != 3 || reqs[2].prefer != "" || reqs[2].method != "GET" || reqs[2].body != "" {
		t.Fatalf("requests = %+v", reqs)
	}
	var data struct{ ID string }
	if err := res.Decode(&data); err != nil || data.ID != "ord_1" {
		t.Fatalf("data = %+v, %v", data, err)
	}
}

func TestCallRetriesBounded(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { drop(w) })
	_, err := sc.client(t).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-b", Retries: 2})
	var e *Error
	if !errors.As(err, &e) || e.Code != idem.CodeNetworkError || e.Status != 0 || e.Requests != 3 || len(sc.seen()) != 3 {
		t.Fatalf("err = %v (%+v) after %d requests, want NETWORK_ERROR after 3", err, e, len(sc.seen()))
	}
	if e.Reconcile() != "order.show" || e.Details["idempotencyKey"] != "k-b" {
		t.Fatalf("details = %v", e.Details)
	}
	sameKeyAndBody(t, sc.seen(), "k-b")

	// No retries at all.
	sc = newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { drop(w) })
	_, err = sc.client(t).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-b", Retries: -1})
	if !errors.As(err, &e) || len(sc.seen()) != 1 {
		t.Fatalf("Retries -1: %d requests", len(sc.seen()))
	}

	// The retry timeout stops retries before the count does.
	sc = newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { drop(w) })
	c := sc.client(t, WithBackoff(100*time.Millisecond, 100*time.Millisecond))
	_, err = c.Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-b", Retries: 100, RetryTimeout: 250 * time.Millisecond})
	// Delays are 50 to 100 ms (jitter), so at most 1 + 250/50 requests.
	if n := len(sc.seen()); !errors.As(err, &e) || n < 2 || n > 6 {
		t.Fatalf("RetryTimeout 250ms with 100 ms backoff: %d requests", n)
	}

	// In flight to the end: the last answer is the error.
	sc = newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
		problem(w, 409, idem.CodeIdempotencyKeyInFlight, true, "")
	})
	_, err = sc.client(t).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-b", Retries: 1, Wait: 2 * time.Second})
	if !errors.As(err, &e) || e.Code != idem.CodeIdempotencyKeyInFlight || len(sc.seen()) != 2 {
		t.Fatalf("err = %v after %d requests", err, len(sc.seen()))
	}
	for _, r := range sc.seen() {
		if r.prefer != "wait=2" {
			t.Fatalf("with Wait 2s, Prefer = %q", r.prefer)
		}
	}
}

func TestCallRefusesKeyWithDryRun(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { envelope(w, 200, "", false) })
	_, err := sc.client(t).Call(context.Background(), "backend.bind", nil, CallOptions{IdempotencyKey: "k", DryRun: true})
	var e *Error
	if !errors.As(err, &e) || !e.Refused || e.Code != idem.CodeIdempotencyKeyNotSupported || e.Requests != 0 {
		t.Fatalf("err = %+v", err)
	}
	if len(sc.seen()) != 0 || sc.catalogReads() != 0 {
		t.Fatal("a refused call sent a request")
	}
}

func TestCallPlacesArguments(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { envelope(w, 200, "", false) })
	c := sc.client(t)
	args := map[string]json.RawMessage{
		"slug": json.RawMessage(`"a b/c"`), "name": json.RawMessage(`"api"`), "environment": json.RawMessage(`"preview"`),
		"originUrl": json.RawMessage(`"https://x"`),
	}
	if _, err := c.Call(context.Background(), "backend.bind", args, CallOptions{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	r := sc.seen()[0]
	if r.method != "PUT" || r.rawPath != "/v1/businesses/a%20b%2Fc/backends/api" || r.query != "dryRun=true&environment=preview" || r.body != `{"originUrl":"https://x"}` {
		t.Fatalf("request = %+v", r)
	}

	// A missing path parameter is refused locally.
	_, err := c.Call(context.Background(), "order.refund", map[string]json.RawMessage{"amount": json.RawMessage(`1`)}, CallOptions{IdempotencyKey: "k"})
	var e *Error
	if !errors.As(err, &e) || e.Code != idem.CodeInvalidInput || !e.Local || len(sc.seen()) != 1 {
		t.Fatalf("missing path parameter: %v", err)
	}
	// An unknown operation too.
	_, err = c.Call(context.Background(), "no.such", nil, CallOptions{})
	if !errors.As(err, &e) || e.Code != idem.CodeOperationNotFound || e.Status != 404 || len(sc.seen()) != 1 {
		t.Fatalf("unknown operation: %v", err)
	}
	// A slip gets a suggestion.
	_, err = c.Call(context.Background(), "order.refnd", nil, CallOptions{})
	if !errors.As(err, &e) || e.Code != idem.CodeOperationNotFound || !strings.Contains(e.Message, "did you mean order.refund?") {
		t.Fatalf("mistyped operation: %v; want a suggestion of order.refund", err)
	}
	if n := sc.catalogReads(); n != 1 {
		t.Fatalf("the catalog was fetched %d times, want once per client", n)
	}
}

func TestSystemRoutes(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/attempts/"):
			io.WriteString(w, `{"data":{"key":"tenant/a+b=c","operation":"order.refund","state":"completed","status":200}}`)
		case r.URL.Path == "/v1/approvals":
			io.WriteString(w, `{"data":[{"id":"apr_1","status":"pending"}]}`)
		case strings.HasSuffix(r.URL.Path, "/approve"):
			io.WriteString(w, `{"data":{"id":"apr_1","status":"approved"}}`)
		case strings.HasPrefix(r.URL.Path, "/v1/executions/"):
			io.WriteString(w, `{"data":{"id":"exe_1","operation":"order.refund","attempts":2,"events":[{"type":"execution.started","at":"2026-01-01T00:00:00Z","attempt":1}]}}`)
		}
	})
	c := sc.client(t)
	ctx := context.Background()
	a, err := c.Attempt(ctx, "tenant/a+b=c")
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.seen()[0].rawPath; got != "/v1/attempts/tenant%2Fa+b=c" {
		t.Fatalf("attempt path = %s", got)
	}
	if a.Data.State != idem.AttemptCompleted || a.Data.Status == nil || *a.Data.Status != 200 || len(a.Body) == 0 {
		t.Fatalf("attempt = %+v", a.Data)
	}
	list, err := c.Approvals(ctx, "pending")
	if err != nil || len(list.Data) != 1 || list.Data[0].ID != "apr_1" || sc.seen()[1].query != "status=pending" {
		t.Fatalf("approvals = %+v, %v", list, err)
	}
	ap, err := c.Approve(ctx, "apr_1", "fine")
	if err != nil || ap.Data.Status != idem.ApprovalApproved || sc.seen()[2].body != `{"reason":"fine"}` || sc.seen()[2].method != "POST" {
		t.Fatalf("approve = %+v, %v, request %+v", ap, err, sc.seen()[2])
	}
	x, err := c.Execution(ctx, "exe_1")
	if err != nil || x.Data.Attempts != 2 || len(x.Data.Events) != 1 {
		t.Fatalf("execution = %+v, %v", x, err)
	}
}

func TestNew(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "http://x/?a=1"} {
		if _, err := New(bad, ""); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	c, err := New("http://127.0.0.1:8080/", "")
	if err != nil || c.Server() != "http://127.0.0.1:8080" {
		t.Fatalf("New = %v, %v", c, err)
	}
}

func TestBackoff(t *testing.T) {
	c, _ := New("http://x", "")
	for n, want := range map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 3: time.Second, 6: 5 * time.Second, 20: 5 * time.Second} {
		for range 20 {
			if d := c.delay(n); d < want/2 || d > want {
				t.Fatalf("delay(%d) = %s, want in [%s, %s]", n, d, want/2, want)
			}
		}
	}
}
