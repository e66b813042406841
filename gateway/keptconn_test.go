package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem/internal/keptconn"
	"github.com/idem-run/idem/internal/keptconn/keptconntest"
)

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// TestTrackedRequestOnAConnectionTheUpstreamClosedIsNotSent: the
// upstream answers one POST and closes the kept-alive connection; the
// transport's reader has not seen it when the next POST gets that
// connection. Not a byte of the POST is written (the upstream, still
// reading, gets none), and the dispatch says so (not written, stale):
// the call is provably not dispatched.
func TestTrackedRequestOnAConnectionTheUpstreamClosedIsNotSent(t *testing.T) {
	d, err, requests := postAfterUpstreamClosed(t, closeTCP)
	if !errors.Is(err, keptconn.ErrPeerClosed) || d.wrote.Load() || !d.stale.Load() {
		t.Fatalf("a POST on a connection the upstream had closed: %v (wrote %v, stale %v); want it refused, not written, stale",
			err, d.wrote.Load(), d.stale.Load())
	}
	if requests != 1 {
		t.Fatalf("the upstream read %d requests, want 1", requests)
	}
}

// TestTrackedRequestOnATLSConnectionTheUpstreamClosed: the same over
// TLS. An upstream that ends the socket without a close_notify (its FIN
// is all that arrived): the POST is refused, not written, stale. One
// that sends close_notify before its FIN: the alert waits unread on the
// socket and hides the FIN, so the POST is written (the upstream, still
// reading, gets it) and stays indeterminate.
func TestTrackedRequestOnATLSConnectionTheUpstreamClosed(t *testing.T) {
	t.Run("FIN only", func(t *testing.T) {
		d, err, requests := postAfterUpstreamClosed(t, closeTLSSocket)
		if !errors.Is(err, keptconn.ErrPeerClosed) || d.wrote.Load() || !d.stale.Load() {
			t.Fatalf("a POST on a TLS connection the upstream had closed: %v (wrote %v, stale %v); want it refused, not written, stale",
				err, d.wrote.Load(), d.stale.Load())
		}
		if requests != 1 {
			t.Fatalf("the upstream read %d requests, want 1", requests)
		}
	})
	t.Run("close_notify then FIN", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("FINArrived reads the TCP state on Linux only")
		}
		d, err, requests := postAfterUpstreamClosed(t, closeTLSNotify)
		if errors.Is(err, keptconn.ErrPeerClosed) || !d.wrote.Load() || d.stale.Load() {
			t.Fatalf("a POST on a TLS connection with the upstream's close_notify unread: %v (wrote %v, stale %v); want it written, not stale",
				err, d.wrote.Load(), d.stale.Load())
		}
		if requests != 2 {
			t.Fatalf("the upstream read %d requests, want 2", requests)
		}
	})
}

// How the upstream of postAfterUpstreamClosed ends its side.
const (
	closeTCP       = iota // no TLS; a FIN
	closeTLSSocket        // TLS; a FIN, no close_notify (the process died, say)
	closeTLSNotify        // TLS; close_notify, then a FIN
)

// postAfterUpstreamClosed: an upstream (over TLS unless how is
// closeTCP) answers one POST and ends its side of the kept-alive
// connection as how says; it goes on reading, to count what arrives. The
// transport's reader, held by keptconntest, has not seen that end when
// the next POST gets the connection: its dispatch, error, and the count
// of requests the upstream read.
func postAfterUpstreamClosed(t *testing.T, how int) (*dispatch, error, int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialer := &keptconntest.Dialer{}
	defer dialer.Close()
	pool := &http.Transport{DialContext: keptconn.Dial(dialer.DialContext)}
	defer pool.CloseIdleConnections()
	scheme := "https"
	serverTLS, clientTLS := keptconntest.TLS(t)
	if how == closeTCP {
		scheme = "http"
		dialer.Answered = int64(len(okAnswer))
	} else {
		pool.TLSClientConfig = clientTLS
	}

	var requests atomic.Int64
	closeIt := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		counted := &keptconntest.Counted{Conn: raw}
		var c net.Conn = counted
		var tc *tls.Conn
		if how != closeTCP {
			tc = tls.Server(counted, serverTLS)
			c = tc
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return // the connection's end: nothing more was read
			}
			io.Copy(io.Discard, req.Body)
			if requests.Add(1) > 1 {
				continue
			}
			if tc != nil {
				counted.Answering(func(end int64) { dialer.Conns()[0].HoldAfter(end) })
			}
			io.WriteString(c, okAnswer)
			<-closeIt
			// Its end of the connection, as when it restarts or its idle
			// timeout passes.
			if how == closeTLSNotify {
				tc.CloseWrite() // close_notify
			}
			raw.(*net.TCPConn).CloseWrite()
		}
	}()

	tr := &tracked{next: pool, limit: 1 << 10}
	post := func() (*dispatch, error) {
		d := &dispatch{}
		ctx := context.WithValue(t.Context(), dispatchKey{}, d)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, scheme+"://"+ln.Addr().String()+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`))
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return d, err
	}

	if d, err := post(); err != nil || !d.wrote.Load() {
		t.Fatalf("the first POST: %v (wrote %v)", err, d.wrote.Load())
	}
	close(closeIt)
	first := dialer.Conns()[0]
	for !keptconntest.FINArrived(first) { // the upstream's end has arrived; net/http's reader is held
		time.Sleep(time.Millisecond)
	}
	if closed := keptconn.PeerClosed(first); closed != (how != closeTLSNotify) {
		t.Fatalf("the upstream's end arrived, PeerClosed says %v", closed)
	}

	d, err := post()
	if err == nil {
		t.Fatal("a POST on a connection the upstream had closed was answered")
	}
	first.Release()
	first.Close()
	ln.Close()
	<-served
	return d, err, requests.Load()
}
