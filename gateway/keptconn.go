package gateway

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
)

// errPeerClosed is the error of a write to a connection the upstream had
// already closed (its FIN or reset had arrived): nothing was written.
var errPeerClosed = errors.New("the upstream had closed the connection before the request was written; nothing of it was sent")

// keptConn is a connection of the upstream's pool. It counts the bytes
// handed to the kernel, so that a request can be proven unsent (none
// went since it got the connection), and it refuses a write once the
// upstream has closed the connection: a kept-alive connection the
// upstream closed (it restarted, or its idle timeout passed) may still
// look idle to net/http, whose reader has not run yet, and a request
// written there would be lost with no way to tell whether the upstream
// read it.
type keptConn struct {
	net.Conn
	written atomic.Int64
}

func (c *keptConn) Write(b []byte) (int, error) {
	if peerClosed(c.Conn) {
		return 0, errPeerClosed
	}
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// keepConns makes dial's connections keptConns.
func keepConns(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &keptConn{Conn: c}, nil
	}
}
