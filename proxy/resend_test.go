package proxy_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/hostile"
	"github.com/idem-run/idem/proxy"
)

// TestForwardHoldsWritesTracedOrNot: the forwarder holds a proxied write
// to one send on its plain client and on the traced one (otelhttp's
// transport wraps the body but gives it no way back), and lets a fresh
// read be re-sent (issue 33 item 1). The upstream (internal/hostile)
// answers the first request of each kept-alive connection and drops the
// second unanswered.
func TestForwardHoldsWritesTracedOrNot(t *testing.T) {
	up, err := hostile.NewDroppingHTTP1()
	if err != nil {
		t.Fatal(err)
	}
	up.Start()
	t.Cleanup(func() { up.Close() })
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
			f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: client}
			h := f.Handler(tc.op)
			before := up.Effects()
			if _, err := h(tc.ctx, &tc.call, idem.RawRequest{Method: "GET", Path: "/c"}); err != nil {
				t.Fatal(err)
			}
			_, err := h(tc.ctx, &tc.call, idem.RawRequest{Method: "GET", Path: "/c"})
			got := up.Effects() - before
			if tc.resends && (err != nil || got != 3) || !tc.resends && (err == nil || got != 2) {
				t.Fatalf("two calls: the upstream read %d requests, the second call's error %v (re-sent by the transport: %v)", got, err, tc.resends)
			}
		})
	}
}
