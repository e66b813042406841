package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// TestForwardHoldsWritesTracedOrNot: the forwarder holds a proxied write
// to one send on its plain client and on the traced one (otelhttp's
// transport wraps the body but gives it no way back), and lets a fresh
// read be re-sent (issue 33 item 1). The upstream answers the first
// request of each kept-alive connection and drops the second unanswered.
func TestForwardHoldsWritesTracedOrNot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var reads atomic.Int32
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
					reads.Add(1)
					if n == 2 {
						return
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	traced := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true}))
	cases := []struct {
		name    string
		ctx     context.Context
		op      proxy.Operation
		call    idem.Call
		resends bool
	}{
		{"write", context.Background(), proxy.Operation{Method: "GET", Path: "/c", Writes: true}, idem.Call{IdempotencyKey: "ik_1", RequestKey: "k"}, false},
		{"traced write", traced, proxy.Operation{Method: "GET", Path: "/c", Writes: true}, idem.Call{IdempotencyKey: "ik_1", RequestKey: "k"}, false},
		{"keyed read", context.Background(), proxy.Operation{Method: "GET", Path: "/c", FreshRead: true}, idem.Call{IdempotencyKey: "ik_1", RequestKey: "k"}, false},
		{"fresh read", context.Background(), proxy.Operation{Method: "GET", Path: "/c", FreshRead: true}, idem.Call{IdempotencyKey: "ik_1"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := proxy.NewClient()
			client.Transport.(*http.Transport).MaxConnsPerHost = 1 // the second call reuses the first's connection
			f := &proxy.Forwarder{Upstream: mustURL(t, "http://"+ln.Addr().String()), Client: client}
			h := f.Handler(tc.op)
			before := reads.Load()
			if _, err := h(tc.ctx, &tc.call, idem.RawRequest{Method: "GET", Path: "/c"}); err != nil {
				t.Fatal(err)
			}
			_, err := h(tc.ctx, &tc.call, idem.RawRequest{Method: "GET", Path: "/c"})
			got := reads.Load() - before
			if tc.resends && (err != nil || got != 3) || !tc.resends && (err == nil || got != 2) {
				t.Fatalf("two calls: the upstream read %d requests, the second call's error %v (re-sent by the transport: %v)", got, err, tc.resends)
			}
		})
	}
}
