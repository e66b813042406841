package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
)

// TestCallResult: CallResult returns the last answer whatever its status,
// as an idem.Result; a raw operation's own answer as idem.RawResultOf
// reads it; an answer that is not idem's as a Foreign error.
func TestCallResult(t *testing.T) {
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		check  func(t *testing.T, res idem.Result, err error)
	}{
		{"envelope", func(w http.ResponseWriter, r *http.Request) {
			envelope(w, 201, r.Header.Get("Idempotency-Key"), true)
		}, func(t *testing.T, res idem.Result, err error) {
			if err != nil || res.Status != 201 || res.Problem != nil || res.Raw || !res.Replayed || res.Meta.Idempotency.Key != "k-1" || string(res.Data) != `{"ok":true}` {
				t.Fatalf("result = %+v, %v", res, err)
			}
		}},
		{"idem problem, not retried with Retries -1", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(idem.HeaderExecutionID, "exe_1") // idem's own problem about a raw operation
			problem(w, 409, idem.CodeIdempotencyKeyInFlight, true, "")
		}, func(t *testing.T, res idem.Result, err error) {
			if err != nil || res.Status != 409 || res.Raw || res.Problem == nil || res.Problem.Code != idem.CodeIdempotencyKeyInFlight {
				t.Fatalf("result = %+v, %v", res, err)
			}
		}},
		{"raw answer", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(idem.HeaderExecutionID, "exe_9")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(202)
			io.WriteString(w, "queued")
		}, func(t *testing.T, res idem.Result, err error) {
			if err != nil || !res.Raw || res.Status != 202 || string(res.Body()) != "queued" || res.Meta.ExecutionID != "exe_9" ||
				res.Meta.Operation != "order.refund" || res.Meta.Idempotency.Key != "k-1" {
				t.Fatalf("result = %+v, %v", res, err)
			}
		}},
		{"raw problem of the upstream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(idem.HeaderExecutionID, "exe_9")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(404)
			io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"code":"NOPE"}`)
		}, func(t *testing.T, res idem.Result, err error) {
			if err != nil || !res.Raw || res.Status != 404 || res.Problem != nil || !strings.Contains(string(res.Data), `"NOPE"`) {
				t.Fatalf("result = %+v, %v", res, err)
			}
		}},
		{"foreign success", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html>ok</html>")
		}, func(t *testing.T, res idem.Result, err error) {
			var e *Error
			if !errors.As(err, &e) || !e.Foreign() || e.Code != idem.CodeInternal || e.Status != 200 || e.Retryable || e.Requests != 1 {
				t.Fatalf("err = %+v", err)
			}
		}},
		{"foreign 502, not retried with Retries -1", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			io.WriteString(w, "<html>bad gateway</html>")
		}, func(t *testing.T, res idem.Result, err error) {
			var e *Error
			if !errors.As(err, &e) || !e.Foreign() || e.Status != 502 || !e.Retryable {
				t.Fatalf("err = %+v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { tt.answer(w, r) })
			res, err := sc.client(t).CallResult(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-1", Retries: -1})
			tt.check(t, res, err)
			reqs := sc.seen()
			if len(reqs) != 1 || reqs[0].key != "k-1" || reqs[0].auth != "Bearer tok" || reqs[0].path != "/v1/orders/ord_1/refund" || reqs[0].prefer != "" {
				t.Fatalf("requests = %+v, want one", reqs)
			}
		})
	}
}

// TestCallResultNetworkError: no answer is NETWORK_ERROR, with the
// reconcile operation, and the server's password is not in the message.
func TestCallResultNetworkError(t *testing.T) {
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) { drop(w) })
	c, err := New(strings.Replace(sc.URL, "http://", "http://user:s3cret@", 1), "tok")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CallResult(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-n", Retries: -1})
	var e *Error
	if !errors.As(err, &e) || e.Code != idem.CodeNetworkError || e.Status != 0 || e.Requests != 1 || e.Reconcile() != "order.show" || len(sc.seen()) != 1 {
		t.Fatalf("err = %+v after %d requests", err, len(sc.seen()))
	}
	if strings.Contains(e.Message, "s3cret") {
		t.Fatalf("the message shows the password: %s", e.Message)
	}
}

// TestRefreshCatalog: Catalog fetches once; RefreshCatalog fetches again
// and replaces the cached catalog, which a failed refresh keeps.
func TestRefreshCatalog(t *testing.T) {
	var reads atomic.Int64
	var failing atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		if failing.Load() {
			problem(w, 503, idem.CodeStoreUnavailable, true, "")
			return
		}
		io.WriteString(w, testCatalog)
	}))
	t.Cleanup(ts.Close)
	c, err := New(ts.URL, "", WithReadRetries(-1, 0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := c.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Catalog(ctx); again != first || reads.Load() != 1 {
		t.Fatalf("Catalog read the server %d times", reads.Load())
	}
	fresh, err := c.RefreshCatalog(ctx)
	if err != nil || fresh == first || reads.Load() != 2 {
		t.Fatalf("RefreshCatalog = %p, %v after %d reads", fresh, err, reads.Load())
	}
	if cached, _ := c.Catalog(ctx); cached != fresh {
		t.Fatal("Catalog does not return the refreshed catalog")
	}
	failing.Store(true)
	if _, err := c.RefreshCatalog(ctx); err == nil || reads.Load() != 3 {
		t.Fatalf("a failed refresh: %v after %d reads (want one, not retried)", err, reads.Load())
	}
	if cached, _ := c.Catalog(ctx); cached != fresh {
		t.Fatal("a failed refresh dropped the cached catalog")
	}
}

// TestTraceContextTravels: a request carries the W3C trace context of its
// ctx, and none without one.
func TestTraceContextTravels(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent")+" "+r.Header.Get("tracestate"))
		mu.Unlock()
		envelope(w, 200, "", false)
	})
	c := sc.client(t)
	state, _ := trace.ParseTraceState("agent=1")
	sc1 := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc1)
	if _, err := c.Call(ctx, "auth.context_token", nil, CallOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), "auth.context_token", nil, CallOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 agent=1", " "}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("trace headers = %q, want %q", got, want)
	}
}

// TestWithAnswerLimit: an answer longer than the limit arrives cut.
func TestWithAnswerLimit(t *testing.T) {
	limit := int64(len(testCatalog)) // the catalog fits
	sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":{"pad":"`+strings.Repeat("x", int(limit))+`"}}`)
	})
	res, err := sc.client(t, WithAnswerLimit(limit)).Call(context.Background(), "order.show", map[string]json.RawMessage{"id": json.RawMessage(`"o"`)}, CallOptions{})
	if err != nil || int64(len(res.Body)) != limit {
		t.Fatalf("result of %d bytes, %v; want %d bytes", len(res.Body), err, limit)
	}
	_, err = sc.client(t, WithAnswerLimit(limit)).CallResult(context.Background(), "order.show", map[string]json.RawMessage{"id": json.RawMessage(`"o"`)}, CallOptions{})
	var e *Error
	if !errors.As(err, &e) || !e.Foreign() {
		t.Fatalf("a cut envelope: %v", err)
	}
	if res, err := sc.client(t).CallResult(context.Background(), "order.show", map[string]json.RawMessage{"id": json.RawMessage(`"o"`)}, CallOptions{}); err != nil || res.Status != 200 {
		t.Fatalf("within the default limit: %+v, %v", res, err)
	}
}
