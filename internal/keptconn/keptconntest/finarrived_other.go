//go:build !linux

package keptconntest

import (
	"net"

	"github.com/idem-run/idem/internal/keptconn"
)

// FINArrived says whether the peer's FIN or reset has reached c's socket
// with no bytes unread before it (keptconn.PeerClosed): the TCP state is
// read on Linux only.
func FINArrived(c net.Conn) bool { return keptconn.PeerClosed(c) }
