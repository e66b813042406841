// Package keptconn tells a request proven unsent on a kept-alive
// connection the upstream had closed (issue 34).
//
// An upstream that closes a kept-alive connection (it restarted, or its
// idle timeout passed) may do so while net/http still holds the
// connection as idle: its reader has not yet run to see the FIN or reset
// in the socket. A request written there is lost, with no way to tell
// whether the upstream read it: indeterminate. Dial's connections refuse
// a write once the peer's end has arrived (a non-blocking MSG_PEEK before
// each write) and count the bytes the kernel took; a Watch, set on a
// request's client trace, says whether any of that request's went.
//
// Over TLS (HTTP/1.1) the Conn is the socket below the TLS connection,
// and the proof holds there too: every byte of a request goes through
// it. Only the socket's own end counts as the upstream's: TLS records
// pending there (a close_notify alert sent before the FIN, session
// tickets) hide the FIN behind them, so the write goes and the request,
// if it is lost, stays indeterminate, as without the peek.
package keptconn

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http/httptrace"
	"sync/atomic"
)

// ErrPeerClosed is the error of a write to a connection the peer had
// already closed (its FIN or reset had arrived): nothing was written.
var ErrPeerClosed = errors.New("the upstream had closed the connection before the request was written; nothing of it was sent")

// Conn is a connection made by Dial: it counts the bytes handed to the
// kernel, and refuses a write once the peer has closed the connection.
type Conn struct {
	net.Conn
	written atomic.Int64
}

func (c *Conn) Write(b []byte) (int, error) {
	if PeerClosed(c.Conn) {
		return 0, ErrPeerClosed
	}
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// Written is the count of bytes the kernel took.
func (c *Conn) Written() int64 { return c.written.Load() }

// Dial makes dial's connections Conns (dial nil: a net.Dialer's).
func Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &Conn{Conn: c}, nil
	}
}

// Watch is what one request did with its connection. Its GotConn goes in
// the request's httptrace.ClientTrace; it is read once the round trip has
// returned with an error (net/http returns it once its write has ended).
type Watch struct {
	conn   atomic.Pointer[Conn]
	start  atomic.Int64
	reused atomic.Bool
}

// GotConn records the request's connection (a Conn, or a TLS
// connection over one that speaks HTTP/1.1), and its count of bytes
// written then. Not under HTTP/2: its requests share the connection, and
// a round trip may return before its write has ended.
func (w *Watch) GotConn(info httptrace.GotConnInfo) {
	nc := info.Conn
	if tc, ok := nc.(*tls.Conn); ok {
		// net/http gives the TLS connection; the count is below it.
		nc = nil
		if tc.ConnectionState().NegotiatedProtocol != "h2" {
			nc = tc.NetConn()
		}
	}
	c, _ := nc.(*Conn)
	if c != nil {
		w.start.Store(c.Written())
		w.reused.Store(info.Reused)
	}
	w.conn.Store(c)
}

// Unwritten says that the request got a Conn and not a byte went to it
// since: nothing of the request was sent. False when its connection was
// not a Conn, or none was got.
func (w *Watch) Unwritten() bool {
	c := w.conn.Load()
	return c != nil && c.Written() == w.start.Load()
}

// Stale says that nothing of the request was sent, on a reused kept-alive
// connection (most likely one the upstream had closed): a new connection
// may take it.
func (w *Watch) Stale() bool { return w.Unwritten() && w.reused.Load() }
