package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Webhook destinations (issue 33, Low; docs/webhooks.md "Destinations"):
// a delivery to a loopback address would let any caller probe the
// server's own ports (a closed port answered "connection refused", an
// open one a status or another error), so the demo refuses it unless
// Config.WebhookLoopback allows it, and always refuses the unspecified
// address (which reaches loopback) and link-local ones (a cloud's
// metadata service). The check runs on the address dialled, after name
// resolution, so that a name resolving to 127.0.0.1 is refused too; a
// refused delivery never connects, so an open port and a closed one get
// the same answer.

// guardedClient returns c with its transport dialling through
// refuseDestination. A transport that is not an *http.Transport is
// returned as it is: its dialling is the embedder's.
func guardedClient(c *http.Client, allowLoopback bool) *http.Client {
	out := *c
	var t *http.Transport
	switch rt := c.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = rt.Clone()
	default:
		return &out
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			return refuseDestination(address, allowLoopback)
		}}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	t.DialTLSContext = nil // TLS over DialContext
	out.Transport = t
	return &out
}

// refuseDestination is the rule: an error for an address the demo does
// not deliver to.
func refuseDestination(address string, allowLoopback bool) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook destination %q: %w", address, err)
	}
	ip := ap.Addr().Unmap()
	switch {
	case ip.IsLoopback() && !allowLoopback:
		return fmt.Errorf("webhook destination refused: %s is a loopback address, which this server delivers to only when started with --webhook-loopback", ip)
	case ip.IsUnspecified():
		return fmt.Errorf("webhook destination refused: %s is the unspecified address; name the receiver's own address", ip)
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return fmt.Errorf("webhook destination refused: %s is a link-local address (such as a cloud metadata service)", ip)
	}
	return nil
}
