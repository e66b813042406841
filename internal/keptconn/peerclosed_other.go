//go:build !unix

package keptconn

import "net"

// PeerClosed cannot tell here: every write is made, and a request
// written to a connection the upstream had closed stays indeterminate.
func PeerClosed(net.Conn) bool { return false }
