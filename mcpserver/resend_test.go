package mcpserver_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var effects atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					body := chargeCatalog
					if !strings.HasPrefix(req.URL.Path, "/v1/operations") {
						effects.Add(1)
						body = `{"data":{"charged":true},"meta":{"operation":"charge.take"}}`
					}
					if n == 2 {
						return
					}
					_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				}
			}()
		}
	}()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = 1 // the call reuses the catalog's connection
	b := mcpserver.NewRemoteBackend("http://"+ln.Addr().String(), tokenAgent, &http.Client{Transport: tr})
	if _, err := b.Descriptors(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := b.Call(t.Context(), "charge.take", map[string]json.RawMessage{"id": json.RawMessage(`"c1"`)}, "k-1", false)
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodeNetworkError || effects.Load() != 1 {
		t.Fatalf("the server ran the call %d times; answer %+v, error %v; want once and NETWORK_ERROR", effects.Load(), res, err)
	}
}
