//go:build unix

package keptconn

import (
	"net"
	"syscall"
)

// PeerClosed says whether the peer's end of c (a socket) has arrived: a
// read would give EOF or a reset now. Bytes not yet read there (under
// TLS, a close_notify alert) come first: false until they are read. It
// peeks without reading or waiting, beside net/http's reader, which may
// be blocked reading c.
func PeerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	raw.Control(func(fd uintptr) {
		var b [1]byte
		// Go's sockets are non-blocking: EAGAIN when nothing is there.
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		closed = (n == 0 && err == nil) || err == syscall.ECONNRESET
	})
	return closed
}
