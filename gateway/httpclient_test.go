package gateway

import (
	"net/http"
	"strings"
	"testing"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTrackedNeverPassesARewindableBody (issue 33 item 1): the transport
// below the gateway's gets no GetBody, so neither HTTP/1's retry of a
// broken reused connection nor HTTP/2's replay after GOAWAY or a refused
// stream can send a request's body twice.
func TestTrackedNeverPassesARewindableBody(t *testing.T) {
	var got *http.Request
	tr := &tracked{header: http.Header{"Idempotency-Key": {"x"}}, limit: 1 << 10, next: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: 202, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})}
	req, _ := http.NewRequest(http.MethodPost, "http://upstream.invalid/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`))
	if req.GetBody == nil {
		t.Fatal("http.NewRequest set no GetBody: the test proves nothing")
	}
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got.GetBody != nil {
		t.Fatal("the transport below got a request it can send again (GetBody)")
	}
	if got.Header.Get("Idempotency-Key") != "x" {
		t.Fatal("the configured header was not sent")
	}
}
