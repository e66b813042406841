//go:build linux

package keptconntest

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// FINArrived says whether the peer's FIN or reset has reached c's socket,
// whatever bytes wait unread before it (the TCP state, TCP_INFO).
func FINArrived(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	arrived := false
	raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		arrived = err == nil && (info.State == unix.BPF_TCP_CLOSE_WAIT || info.State == unix.BPF_TCP_CLOSE)
	})
	return arrived
}
