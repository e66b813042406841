package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pgstore"
)

// silentListener accepts connections on 127.0.0.1 and never answers: a
// server that is not PostgreSQL, or one that is stuck. It returns the port.
func silentListener(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never written to
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// A server that accepts the connection and never answers fails Open within
// StoreConfig.ConnectTimeout, as STORE_UNAVAILABLE, naming the host, the
// port and what to check, not after the caller's own deadline.
func TestOpenSilentServerTimesOut(t *testing.T) {
	port := silentListener(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a bound far beyond the connect timeout
	defer cancel()
	url := fmt.Sprintf("postgres://idem@127.0.0.1:%d/app?sslmode=disable", port)
	s, err := pgstore.Open(ctx, url, idem.StoreConfig{ConnectTimeout: 100 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("Open of a silent server succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("Open waited for the caller's deadline, not the connect timeout: %v", err)
	}
	var u *pgstore.UnreachableError
	if !errors.As(err, &u) || u.Timeout != 100*time.Millisecond || u.Port != uint16(port) {
		t.Fatalf("Open: %v; want an *UnreachableError after the 100ms connect timeout on port %d", err, port)
	}
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("Open: %v is not STORE_UNAVAILABLE", err)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("127.0.0.1:%d", port), `database "app"`, "within the connect timeout of 100ms", "pg_isready", "connect_timeout"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "(migrate)") {
		t.Errorf("message %q names an internal step", msg)
	}
}

// A refused connection names the server too.
func TestOpenRefusedNamesServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	_, err = pgstore.Open(t.Context(), fmt.Sprintf("postgres://idem@127.0.0.1:%d/app?sslmode=disable", port), idem.StoreConfig{ConnectTimeout: 10 * time.Second})
	var u *pgstore.UnreachableError
	if !errors.As(err, &u) || u.Timeout != 0 {
		t.Fatalf("Open: %v; want an *UnreachableError without a timeout", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("cannot connect to PostgreSQL at 127.0.0.1:%d", port)) || !strings.Contains(msg, "pg_isready -h 127.0.0.1 -p") {
		t.Errorf("message %q does not name the server and what to check", msg)
	}
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("Open: %v is not STORE_UNAVAILABLE", err)
	}
}
