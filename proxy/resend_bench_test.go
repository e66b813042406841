package proxy_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// BenchmarkForwardHeld is the cost of holding a call to one send (issue 33
// item 1): a proxied write (a GET declared a write, a POST with a body)
// and a fresh read, on a kept-alive upstream. conns/op counts the
// upstream connections the calls opened per call: 0 when they reuse one.
//
//	go test -run '^$' -bench BenchmarkForwardHeld -benchtime 2000x ./proxy/
func BenchmarkForwardHeld(b *testing.B) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	u, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		op   proxy.Operation
		req  idem.RawRequest
	}{
		{"GET write", proxy.Operation{Method: "GET", Path: "/charges/{id}", Writes: true},
			idem.RawRequest{Method: "GET", Path: "/charges/c1"}},
		{"POST write", proxy.Operation{Method: "POST", Path: "/charges", Writes: true},
			idem.RawRequest{Method: "POST", Path: "/charges", Body: []byte(`{"amount":1}`)}},
		{"GET fresh read", proxy.Operation{Method: "GET", Path: "/charges", FreshRead: true},
			idem.RawRequest{Method: "GET", Path: "/charges"}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			f := &proxy.Forwarder{Upstream: u, Client: proxy.NewClient()}
			h := f.Handler(tc.op)
			call := &idem.Call{IdempotencyKey: "ik_1", RequestKey: "k-1"}
			if tc.op.FreshRead {
				call = &idem.Call{IdempotencyKey: "ik_1"}
			}
			before := conns.Load()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h(b.Context(), call, tc.req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(conns.Load()-before)/float64(b.N), "conns/op")
		})
	}
}
