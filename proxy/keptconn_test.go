package proxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/keptconn"
	"github.com/idem-run/idem/internal/keptconn/keptconntest"
	"github.com/idem-run/idem/proxy"
)

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// closingUpstream answers each request on a connection of its own; the
// first connection it half-closes once its first request is answered
// and closeFirst is closed, as an upstream that restarts or whose idle
// timeout passes does, and it goes on reading there to count what
// arrives. With refuseNew it accepts no connection after the first.
type closingUpstream struct {
	ln         net.Listener
	closeFirst chan struct{}
	onFirst    atomic.Int64  // requests read on the first connection
	onOthers   atomic.Int64  // requests read on the others
	firstDone  chan struct{} // closed once the first connection has been read to its end
}

func newClosingUpstream(t *testing.T, refuseNew bool) *closingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &closingUpstream{ln: ln, closeFirst: make(chan struct{}), firstDone: make(chan struct{})}
	go func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if first && refuseNew {
				ln.Close()
			}
			go u.serve(c, first)
		}
	}()
	return u
}

func (u *closingUpstream) serve(c net.Conn, first bool) {
	defer c.Close()
	if first {
		defer close(u.firstDone)
	}
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if !first {
			u.onOthers.Add(1)
			_, _ = io.WriteString(c, okAnswer)
			continue
		}
		if u.onFirst.Add(1) > 1 {
			continue // read after its end: counted, never answered
		}
		_, _ = io.WriteString(c, okAnswer)
		<-u.closeFirst
		_ = c.(*net.TCPConn).CloseWrite()
	}
}

// TestForwardOnAConnectionTheUpstreamClosedIsNotSent: the upstream
// answers one keyed POST and closes the kept-alive connection; the
// transport's reader has not seen it when the next POST gets that
// connection (keptconntest holds it). Not a byte of the POST goes there:
// it is sent once more on a new connection and answered; when the
// upstream takes no new connection, the call is NotDispatched (503
// UPSTREAM_UNAVAILABLE, its key free), not indeterminate (issue 34).
func TestForwardOnAConnectionTheUpstreamClosedIsNotSent(t *testing.T) {
	post := idem.RawRequest{Method: "POST", Path: "/things", Body: []byte(`{"a":1}`)}
	write := proxy.Operation{Name: "createThing", Method: "POST", Path: "/things", Writes: true}
	for _, refuseNew := range []bool{false, true} {
		name := "sent once more on a new connection"
		if refuseNew {
			name = "not dispatched when no new connection is made"
		}
		t.Run(name, func(t *testing.T) {
			up := newClosingUpstream(t, refuseNew)
			dialer := &keptconntest.Dialer{Answered: int64(len(okAnswer))}
			defer dialer.Close()
			client := proxy.NewClient()
			pool := client.Transport.(*http.Transport)
			pool.DialContext = keptconn.Dial(dialer.DialContext)
			defer pool.CloseIdleConnections()
			f := &proxy.Forwarder{Upstream: mustURL(t, "http://"+up.ln.Addr().String()), Client: client}
			h := f.Handler(write)

			if _, err := h(t.Context(), &idem.Call{IdempotencyKey: "ik_1", RequestKey: "k1"}, post); err != nil {
				t.Fatalf("the first call: %v", err)
			}
			close(up.closeFirst)
			first := dialer.Conns()[0]
			for !keptconn.PeerClosed(first.Conn) { // the upstream's FIN has arrived; net/http's reader is held
				time.Sleep(time.Millisecond)
			}

			res, err := h(t.Context(), &idem.Call{IdempotencyKey: "ik_2", RequestKey: "k2"}, post)
			if refuseNew {
				var e *idem.Error
				if !idem.IsNotDispatched(err) || !errors.As(err, &e) || e.Code != idem.CodeUpstreamUnavailable || e.Status != 503 {
					t.Fatalf("the second call: %v; want NotDispatched, 503 UPSTREAM_UNAVAILABLE", err)
				}
			} else if err != nil || res.Status != 200 {
				t.Fatalf("the second call: %d, %v; want it answered on a new connection", res.Status, err)
			}
			first.Release()
			first.Close() // net/http closed it on the refused write; the upstream then reads to its end
			<-up.firstDone
			wantOthers := int64(1)
			if refuseNew {
				wantOthers = 0
			}
			if n, m := up.onFirst.Load(), up.onOthers.Load(); n != 1 || m != wantOthers {
				t.Fatalf("the upstream read %d requests on the closed connection (want 1) and %d on new ones (want %d)", n, m, wantOthers)
			}
		})
	}
}

// TestNewClientConnectionsAreKept: the forwarder's client dials
// keptconn.Conns, which make the test above hold with the real dialer.
func TestNewClientConnectionsAreKept(t *testing.T) {
	up := newUpstream(t, nil)
	var got net.Conn
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { got = info.Conn },
	}), http.MethodGet, up.URL, nil)
	client := proxy.NewClient()
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, ok := got.(*keptconn.Conn); !ok {
		t.Fatalf("the client's connection is a %T, want a *keptconn.Conn", got)
	}
}
