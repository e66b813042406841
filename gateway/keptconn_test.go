package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var requests atomic.Int64
	closeIt := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
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
				return
			}
			io.WriteString(c, okAnswer)
			<-closeIt
			// Its end of the connection, as when it restarts or its idle
			// timeout passes; it goes on reading, to count what arrives.
			c.(*net.TCPConn).CloseWrite()
		}
	}()

	dialer := &keptconntest.Dialer{Answered: int64(len(okAnswer))}
	defer dialer.Close()
	pool := &http.Transport{DialContext: keptconn.Dial(dialer.DialContext)}
	defer pool.CloseIdleConnections()
	tr := &tracked{next: pool, limit: 1 << 10}
	post := func() (*dispatch, error) {
		d := &dispatch{}
		ctx := context.WithValue(t.Context(), dispatchKey{}, d)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`))
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
	for !keptconn.PeerClosed(first.Conn) { // the upstream's FIN has arrived; net/http's reader is held
		time.Sleep(time.Millisecond)
	}

	d, err := post()
	if err == nil {
		t.Fatal("a POST on a connection the upstream had closed was answered")
	}
	if !errors.Is(err, keptconn.ErrPeerClosed) || d.wrote.Load() || !d.stale.Load() {
		t.Fatalf("a POST on a connection the upstream had closed: %v (wrote %v, stale %v); want it refused, not written, stale",
			err, d.wrote.Load(), d.stale.Load())
	}
	ln.Close()
	<-served
	if n := requests.Load(); n != 1 {
		t.Fatalf("the upstream read %d requests, want 1", n)
	}
}
