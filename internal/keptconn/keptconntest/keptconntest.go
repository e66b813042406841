// Package keptconntest holds a kept-alive connection's reader back, for
// the tests of a request on a connection the upstream had closed.
package keptconntest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// Held holds net/http's reader once it has read Answered bytes (the
// first answer, whole), until the next request is written: the reader of
// a kept-alive connection late to see that the upstream closed it, as on
// a loaded machine (issue 34).
type Held struct {
	net.Conn
	Answered int64
	read     atomic.Int64
	hold     chan struct{}
	release  sync.Once
}

func (c *Held) answered() bool { return c.read.Load() >= c.Answered }

func (c *Held) Read(b []byte) (int, error) {
	if c.answered() {
		<-c.hold
	}
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *Held) Write(b []byte) (int, error) {
	// Whether the answer was read before this write began: one read
	// while the first request is being written must not free the reader.
	next := c.answered()
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

// Dialer dials Held connections whose reader is held after answered
// bytes, and keeps them, in order, for the test.
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
	h := &Held{Conn: c, Answered: d.Answered, hold: make(chan struct{})}
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
