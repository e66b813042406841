package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// heldConn holds net/http's reader once it has read the first answer
// whole, until the next request is written: the reader of a kept-alive
// connection late to see that the upstream closed it, as on a loaded
// machine (issue 34: the gateway's tests that stop their upstream).
type heldConn struct {
	net.Conn
	read    atomic.Int64
	hold    chan struct{}
	release sync.Once
}

func (c *heldConn) answered() bool { return c.read.Load() >= int64(len(okAnswer)) }

func (c *heldConn) Read(b []byte) (int, error) {
	if c.answered() {
		<-c.hold
	}
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *heldConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.answered() {
		c.release.Do(func() { close(c.hold) }) // the next request went: let the reader see what became of it
	}
	return n, err
}

func (c *heldConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

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

	var conns []*heldConn
	var mu sync.Mutex
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		h := &heldConn{Conn: c, hold: make(chan struct{})}
		mu.Lock()
		conns = append(conns, h)
		mu.Unlock()
		return h, nil
	}
	pool := &http.Transport{DialContext: keepConns(dial)}
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
	mu.Lock()
	first := conns[0]
	mu.Unlock()
	defer first.release.Do(func() { close(first.hold) })
	for !peerClosed(first.Conn) { // the upstream's FIN has arrived; net/http's reader is held
		time.Sleep(time.Millisecond)
	}

	d, err := post()
	if err == nil {
		t.Fatal("a POST on a connection the upstream had closed was answered")
	}
	if !errors.Is(err, errPeerClosed) || d.wrote.Load() || !d.stale.Load() {
		t.Fatalf("a POST on a connection the upstream had closed: %v (wrote %v, stale %v); want it refused, not written, stale",
			err, d.wrote.Load(), d.stale.Load())
	}
	ln.Close()
	<-served
	if n := requests.Load(); n != 1 {
		t.Fatalf("the upstream read %d requests, want 1", n)
	}
}

// TestKeptConnWritesUntilTheUpstreamsEnd: a write goes while the
// upstream's end has not arrived; once its reset has, none does.
func TestKeptConnWritesUntilTheUpstreamsEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := keepConns(nil)(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := <-accepted
	if n, err := c.Write([]byte("ping")); n != 4 || err != nil {
		t.Fatalf("a write to a live connection: %d, %v", n, err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(server, b); err != nil || string(b) != "ping" {
		t.Fatalf("the upstream read %q, %v", b, err)
	}
	server.(*net.TCPConn).SetLinger(0)
	server.Close() // a reset
	for !peerClosed(c.(*keptConn).Conn) {
		time.Sleep(time.Millisecond)
	}
	if n, err := c.Write([]byte("pong")); n != 0 || !errors.Is(err, errPeerClosed) {
		t.Fatalf("a write after the upstream's reset: %d, %v; want 0, refused", n, err)
	}
	if k := c.(*keptConn).written.Load(); k != 4 {
		t.Fatalf("counted %d bytes written, want 4", k)
	}
}

// BenchmarkKeptConnWrite is the cost of the peek before each write: a
// 512-byte write to a loopback connection whose reader discards, through
// a keptConn and straight.
func BenchmarkKeptConnWrite(b *testing.B) {
	for _, kept := range []bool{false, true} {
		name := "plain"
		if kept {
			name = "kept"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err == nil {
					io.Copy(io.Discard, c)
					c.Close()
				}
			}()
			dial := (&net.Dialer{}).DialContext
			if kept {
				dial = keepConns(nil)
			}
			c, err := dial(b.Context(), "tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg := make([]byte, 512)
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
