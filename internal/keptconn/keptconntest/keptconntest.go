// Package keptconntest holds a kept-alive connection's reader back, for
// the tests of a request on a connection the upstream had closed.
package keptconntest

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// Held holds net/http's reader once it has read the first answer whole
// (HoldAfter's count of bytes), until the next request is written: the
// reader of a kept-alive connection late to see that the upstream closed
// it, as on a loaded machine (issue 34).
type Held struct {
	net.Conn
	answered atomic.Int64 // 0: not known yet
	read     atomic.Int64
	hold     chan struct{}
	release  sync.Once
}

// HoldAfter holds the reader once it has read n bytes in all. Under TLS
// the count is of the socket's bytes, known to the upstream (Counted).
func (c *Held) HoldAfter(n int64) { c.answered.Store(n) }

func (c *Held) isAnswered() bool {
	n := c.answered.Load()
	return n > 0 && c.read.Load() >= n
}

func (c *Held) Read(b []byte) (int, error) {
	if c.isAnswered() {
		<-c.hold
	}
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *Held) Write(b []byte) (int, error) {
	// Whether the answer was read before this write began: one read
	// while the first request is being written must not free the reader.
	next := c.isAnswered()
	n, err := c.Conn.Write(b)
	if next {
		c.Release() // the next request went: let the reader see what became of it
	}
	return n, err
}

// Release lets the reader go on.
func (c *Held) Release() { c.release.Do(func() { close(c.hold) }) }

// SyscallConn is the socket's, for keptconn.PeerClosed.
func (c *Held) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// Dialer dials Held connections whose reader is held after Answered
// bytes (0: once HoldAfter says), and keeps them, in order, for the test.
type Dialer struct {
	Answered int64
	mu       sync.Mutex
	conns    []*Held
}

// DialContext dials a Held connection.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	h := &Held{Conn: c, hold: make(chan struct{})}
	h.HoldAfter(d.Answered)
	d.mu.Lock()
	d.conns = append(d.conns, h)
	d.mu.Unlock()
	return h, nil
}

// Conns are the connections dialed so far.
func (d *Dialer) Conns() []*Held {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*Held(nil), d.conns...)
}

// Close releases every connection's reader.
func (d *Dialer) Close() {
	for _, c := range d.Conns() {
		c.Release()
	}
}

// Counted is the upstream's end of a socket under TLS: it counts the
// bytes written, so that the client's Held knows where the answer ends.
type Counted struct {
	net.Conn
	written int64
	answer  func(end int64)
}

// Answering has the next write (the TLS record of the answer) call end
// with the count of bytes the socket will have carried once it is done,
// before it is written.
func (c *Counted) Answering(end func(int64)) { c.answer = end }

func (c *Counted) Write(b []byte) (int, error) {
	if c.answer != nil {
		c.answer(c.written + int64(len(b)))
		c.answer = nil
	}
	n, err := c.Conn.Write(b)
	c.written += int64(n)
	return n, err
}

// TLS is a server config with httptest's certificate (valid for
// 127.0.0.1), speaking HTTP/1.1 only, and a client config trusting it.
func TLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	defer srv.Close()
	server = srv.TLS.Clone()
	server.NextProtos = []string{"http/1.1"}
	return server, srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}
