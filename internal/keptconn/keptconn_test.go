package keptconn_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/idem-run/idem/internal/keptconn"
	"github.com/idem-run/idem/internal/keptconn/keptconntest"
)

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
	c, err := keptconn.Dial(nil)(t.Context(), "tcp", ln.Addr().String())
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
	for !keptconn.PeerClosed(c.(*keptconn.Conn).Conn) {
		time.Sleep(time.Millisecond)
	}
	if n, err := c.Write([]byte("pong")); n != 0 || !errors.Is(err, keptconn.ErrPeerClosed) {
		t.Fatalf("a write after the upstream's reset: %d, %v; want 0, refused", n, err)
	}
	if k := c.(*keptconn.Conn).Written(); k != 4 {
		t.Fatalf("counted %d bytes written, want 4", k)
	}
}

// BenchmarkKeptConnWrite is the cost of the peek before each write: a
// 512-byte write to a loopback connection whose reader discards, through
// a keptconn.Conn and straight.
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
				dial = keptconn.Dial(nil)
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

// TestWatch: a request on a Conn is unwritten until a byte goes, and
// stale only on a reused connection; on another connection, or none, it
// is never known unsent.
func TestWatch(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	go io.Copy(io.Discard, server)
	c := &keptconn.Conn{Conn: client}
	defer c.Close()

	var none keptconn.Watch
	if none.Unwritten() || none.Stale() {
		t.Fatal("a request that got no connection is known unsent")
	}
	var other keptconn.Watch
	other.GotConn(httptrace.GotConnInfo{Conn: client, Reused: true})
	if other.Unwritten() || other.Stale() {
		t.Fatal("a request on a connection that is not a Conn is known unsent")
	}
	// net/http gives a TLS connection's GotConn the *tls.Conn; the
	// count is of the Conn below it.
	overTLS := tls.Client(c, &tls.Config{})
	for _, got := range []net.Conn{c, overTLS} {
		for _, reused := range []bool{false, true} {
			var w keptconn.Watch
			w.GotConn(httptrace.GotConnInfo{Conn: got, Reused: reused})
			if !w.Unwritten() || w.Stale() != reused {
				t.Fatalf("%T, reused %v, nothing written: unwritten %v, stale %v", got, reused, w.Unwritten(), w.Stale())
			}
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if w.Unwritten() || w.Stale() {
				t.Fatalf("%T, reused %v, a byte written: still unwritten", got, reused)
			}
		}
	}
	// A handshaken TLS connection: HTTP/1.1 counts; HTTP/2, whose
	// requests share the connection, never proves a request unsent.
	for _, proto := range []string{"http/1.1", "h2"} {
		w := handshaken(t, proto)
		var watch keptconn.Watch
		watch.GotConn(httptrace.GotConnInfo{Conn: w, Reused: true})
		if got, want := watch.Stale(), proto == "http/1.1"; got != want {
			t.Fatalf("TLS speaking %s, nothing written: stale %v, want %v", proto, got, want)
		}
	}
	var plain keptconn.Watch
	plain.GotConn(httptrace.GotConnInfo{Conn: tls.Client(client, &tls.Config{}), Reused: true})
	if plain.Unwritten() || plain.Stale() {
		t.Fatal("a request on a TLS connection over a connection that is not a Conn is known unsent")
	}
}

// handshaken is the client end of a TLS connection over a Conn, its
// handshake done with proto negotiated.
func handshaken(t *testing.T, proto string) *tls.Conn {
	t.Helper()
	serverTLS, clientTLS := keptconntest.TLS(t)
	serverTLS.NextProtos, clientTLS.NextProtos = []string{proto}, []string{proto}
	clientTLS.ServerName = "127.0.0.1" // httptest's certificate names it
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	server := tls.Server(b, serverTLS)
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	client := tls.Client(&keptconn.Conn{Conn: a}, clientTLS)
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := client.ConnectionState().NegotiatedProtocol; got != proto {
		t.Fatalf("negotiated %q, want %q", got, proto)
	}
	go io.Copy(io.Discard, server) // what the client writes next
	return client
}
