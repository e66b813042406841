package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/hostile"
)

// chargeCatalog declares a GET that writes, keyed (same_key_replay).
const chargeCatalog = `{"operations":[
{"name":"charge.take","method":"GET","path":"/v1/charges/{id}","summary":"s","sideEffect":"write","idempotent":true,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},
 "retry":{"kind":"same_key_replay","keyRequired":true,"enforcement":"idempotency_reservation","responseSemantics":"original_attempt_result","reconcile":null,"rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{"id":{"type":"string","x-idem-in":"path"}}},"outputSchema":{}}
],"directCliOperations":[]}`

// dropServer is an idem server on a raw socket (internal/hostile) that
// answers the first request of each connection (keeping it alive) and
// drops the connection after reading the second; every operation request
// it reads is an effect.
func dropServer(t *testing.T) *hostile.DroppingHTTP1 {
	t.Helper()
	s, err := hostile.NewDroppingHTTP1()
	if err != nil {
		t.Fatal(err)
	}
	s.Answer = func(r *http.Request) (string, bool) {
		if strings.HasPrefix(r.URL.Path, "/v1/operations") {
			return chargeCatalog, false
		}
		return `{"data":{"charged":true},"meta":{"operation":"charge.take"}}`, true
	}
	s.Start()
	t.Cleanup(func() { s.Close() })
	return s
}

// TestCallIsNeverResentBelowTheClient: a keyed call of a GET that writes,
// on a kept-alive connection the server drops after reading it, is sent
// only as often as the client's own rules say (Requests). Before issue 33
// item 1 net/http re-sent it by itself: two effects for one request.
func TestCallIsNeverResentBelowTheClient(t *testing.T) {
	for _, retries := range []int{-1, 0} {
		srv := dropServer(t)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxConnsPerHost = 1 // the call reuses the catalog's connection
		c, err := New(srv.URL, "t", WithHTTPClient(&http.Client{Transport: tr}), WithBackoff(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Call(context.Background(), "charge.take", map[string]json.RawMessage{"id": json.RawMessage(`"c1"`)}, CallOptions{IdempotencyKey: "k-1", Retries: retries})
		requests := 0
		var e *Error
		switch {
		case err == nil:
			requests = res.Requests
		case errors.As(err, &e) && e.Code == idem.CodeNetworkError:
			requests = e.Requests
		default:
			t.Fatalf("retries %d: %v", retries, err)
		}
		if got := int(srv.Effects()); got != requests {
			t.Fatalf("retries %d: the client sent %d request(s) and the server ran %d: something below the client re-sent the call", retries, requests, got)
		}
		if retries < 0 && err == nil {
			t.Fatalf("retries %d: the dropped call answered %+v; want NETWORK_ERROR", retries, res)
		}
	}
}
