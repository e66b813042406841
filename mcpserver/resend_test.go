package mcpserver_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/hostile"
	"github.com/idem-run/idem/mcpserver"
)

// chargeCatalog declares a keyed GET that writes.
const chargeCatalog = `{"operations":[
{"name":"charge.take","method":"GET","path":"/v1/charges/{id}","summary":"s","sideEffect":"write","idempotent":true,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},
 "retry":{"kind":"same_key_replay","keyRequired":true,"enforcement":"idempotency_reservation","responseSemantics":"original_attempt_result","reconcile":null,"rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],
 "inputSchema":{"type":"object","properties":{"id":{"type":"string","x-idem-in":"path"}}},"outputSchema":{}}
],"directCliOperations":[]}`

// TestRemoteBackendNeverResendsBelowIt: idem mcp's backend (the Go
// client) calls a keyed GET that writes on a kept-alive connection which
// the server drops after reading the call: one effect and NETWORK_ERROR,
// never the transport's second send (issue 33 item 1; before: two
// effects and a success).
func TestRemoteBackendNeverResendsBelowIt(t *testing.T) {
	srv, err := hostile.NewDroppingHTTP1()
	if err != nil {
		t.Fatal(err)
	}
	srv.Answer = func(r *http.Request) (string, bool) {
		if strings.HasPrefix(r.URL.Path, "/v1/operations") {
			return chargeCatalog, false
		}
		return `{"data":{"charged":true},"meta":{"operation":"charge.take"}}`, true
	}
	srv.Start()
	t.Cleanup(func() { srv.Close() })
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = 1 // the call reuses the catalog's connection
	b := mcpserver.NewRemoteBackend(srv.URL, tokenAgent, &http.Client{Transport: tr})
	if _, err := b.Descriptors(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := b.Call(t.Context(), "charge.take", map[string]json.RawMessage{"id": json.RawMessage(`"c1"`)}, "k-1", false)
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodeNetworkError || srv.Effects() != 1 {
		t.Fatalf("the server ran the call %d times; answer %+v, error %v; want once and NETWORK_ERROR", srv.Effects(), res, err)
	}
}
