package proxy_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/keptconn"
	"github.com/idem-run/idem/internal/keptconn/keptconntest"
	"github.com/idem-run/idem/proxy"
)

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// How a closingUpstream ends its side of the first connection.
const (
	closeTCP       = iota // no TLS; a FIN
	closeTLSSocket        // TLS; a FIN, no close_notify (the process died, say)
	closeTLSNotify        // TLS; close_notify, then a FIN
)

// closingUpstream answers each request on a connection of its own (over
// TLS unless how is closeTCP); the first connection it ends as how says
// once its first request is answered and closeFirst is closed, as an
// upstream that restarts or whose idle timeout passes does, and it goes
// on reading there to count what arrives. With refuseNew it accepts no
// connection after the first.
type closingUpstream struct {
	ln         net.Listener
	how        int
	tls        *tls.Config
	answering  func(end int64) // the first answer's end, in the socket's bytes (keptconntest.Counted)
	closeFirst chan struct{}
	onFirst    atomic.Int64  // requests read on the first connection
	onOthers   atomic.Int64  // requests read on the others
	firstDone  chan struct{} // closed once the first connection has been read to its end
}

func newClosingUpstream(t *testing.T, how int, serverTLS *tls.Config, refuseNew bool, answering func(int64)) *closingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &closingUpstream{ln: ln, how: how, tls: serverTLS, answering: answering, closeFirst: make(chan struct{}), firstDone: make(chan struct{})}
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

func (u *closingUpstream) serve(raw net.Conn, first bool) {
	counted := &keptconntest.Counted{Conn: raw}
	var c net.Conn = counted
	var tc *tls.Conn
	if u.how != closeTCP {
		tc = tls.Server(counted, u.tls)
		c = tc
	}
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
		if tc != nil {
			counted.Answering(u.answering)
		}
		_, _ = io.WriteString(c, okAnswer)
		<-u.closeFirst
		if u.how == closeTLSNotify {
			_ = tc.CloseWrite() // close_notify
		}
		_ = raw.(*net.TCPConn).CloseWrite()
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
	testForwardNotSent(t, closeTCP)
}

// TestForwardOnATLSConnectionTheUpstreamClosedIsNotSent: the same over
// TLS, the upstream ending the socket without a close_notify (its FIN is
// all that arrived).
func TestForwardOnATLSConnectionTheUpstreamClosedIsNotSent(t *testing.T) {
	testForwardNotSent(t, closeTLSSocket)
}

func testForwardNotSent(t *testing.T, how int) {
	for _, refuseNew := range []bool{false, true} {
		name := "sent once more on a new connection"
		if refuseNew {
			name = "not dispatched when no new connection is made"
		}
		t.Run(name, func(t *testing.T) {
			res, err, onFirst, onOthers := forwardAfterUpstreamClosed(t, how, refuseNew)
			if refuseNew {
				var e *idem.Error
				if !idem.IsNotDispatched(err) || !errors.As(err, &e) || e.Code != idem.CodeUpstreamUnavailable || e.Status != 503 {
					t.Fatalf("the second call: %v; want NotDispatched, 503 UPSTREAM_UNAVAILABLE", err)
				}
			} else if err != nil || res.Status != 200 {
				t.Fatalf("the second call: %d, %v; want it answered on a new connection", res.Status, err)
			}
			wantOthers := int64(1)
			if refuseNew {
				wantOthers = 0
			}
			if onFirst != 1 || onOthers != wantOthers {
				t.Fatalf("the upstream read %d requests on the closed connection (want 1) and %d on new ones (want %d)", onFirst, onOthers, wantOthers)
			}
		})
	}
}

// TestForwardOnATLSConnectionWithTheUpstreamsCloseNotifyUnread: an
// upstream over TLS that sends close_notify before its FIN: the alert
// waits unread on the socket and hides the FIN, so the POST is written
// (the upstream, still reading, gets it) and the call stays
// indeterminate, never sent again.
func TestForwardOnATLSConnectionWithTheUpstreamsCloseNotifyUnread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("keptconntest.FINArrived reads the TCP state on Linux only")
	}
	_, err, onFirst, onOthers := forwardAfterUpstreamClosed(t, closeTLSNotify, false)
	if err == nil || idem.IsNotDispatched(err) {
		t.Fatalf("the second call: %v; want it indeterminate", err)
	}
	if onFirst != 2 || onOthers != 0 {
		t.Fatalf("the upstream read %d requests on the closed connection (want 2) and %d on new ones (want 0)", onFirst, onOthers)
	}
}

// forwardAfterUpstreamClosed forwards a keyed POST to a closingUpstream,
// then another once its end of the connection has arrived, with
// net/http's reader held: the second call's result, and the requests
// the upstream read on the first connection and on others.
func forwardAfterUpstreamClosed(t *testing.T, how int, refuseNew bool) (res idem.RawResponse, err error, onFirst, onOthers int64) {
	post := idem.RawRequest{Method: "POST", Path: "/things", Body: []byte(`{"a":1}`)}
	write := proxy.Operation{Name: "createThing", Method: "POST", Path: "/things", Writes: true}
	dialer := &keptconntest.Dialer{}
	defer dialer.Close()
	client := proxy.NewClient()
	pool := client.Transport.(*http.Transport)
	pool.DialContext = keptconn.Dial(dialer.DialContext)
	defer pool.CloseIdleConnections()
	scheme := "https"
	serverTLS, clientTLS := keptconntest.TLS(t)
	if how == closeTCP {
		scheme = "http"
		dialer.Answered = int64(len(okAnswer))
	} else {
		pool.TLSClientConfig = clientTLS
	}
	up := newClosingUpstream(t, how, serverTLS, refuseNew, func(end int64) { dialer.Conns()[0].HoldAfter(end) })
	f := &proxy.Forwarder{Upstream: mustURL(t, scheme+"://"+up.ln.Addr().String()), Client: client}
	h := f.Handler(write)

	if _, err := h(t.Context(), &idem.Call{IdempotencyKey: "ik_1", RequestKey: "k1"}, post); err != nil {
		t.Fatalf("the first call: %v", err)
	}
	close(up.closeFirst)
	first := dialer.Conns()[0]
	for !keptconntest.FINArrived(first) { // the upstream's end has arrived; net/http's reader is held
		time.Sleep(time.Millisecond)
	}
	if closed := keptconn.PeerClosed(first); closed != (how != closeTLSNotify) {
		t.Fatalf("the upstream's end arrived, PeerClosed says %v", closed)
	}

	res, err = h(t.Context(), &idem.Call{IdempotencyKey: "ik_2", RequestKey: "k2"}, post)
	first.Release()
	first.Close() // net/http closed it on the refused write; the upstream then reads to its end
	<-up.firstDone
	return res, err, up.onFirst.Load(), up.onOthers.Load()
}

// TestNewClientConnectionsAreKept: the forwarder's client dials
// keptconn.Conns, which make the tests above hold with the real dialer;
// over TLS, they are below the TLS connection net/http gives GotConn.
func TestNewClientConnectionsAreKept(t *testing.T) {
	up := newUpstream(t, nil)
	overTLS := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer overTLS.Close()
	for _, url := range []string{up.URL, overTLS.URL} {
		var got net.Conn
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { got = info.Conn },
		}), http.MethodGet, url, nil)
		client := proxy.NewClient()
		client.Transport.(*http.Transport).TLSClientConfig = overTLS.Client().Transport.(*http.Transport).TLSClientConfig
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		client.CloseIdleConnections()
		if tc, ok := got.(*tls.Conn); ok {
			got = tc.NetConn()
		}
		if _, ok := got.(*keptconn.Conn); !ok {
			t.Fatalf("%s: the client's connection is a %T, want a *keptconn.Conn", url, got)
		}
	}
}
