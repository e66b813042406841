package sendonce_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem/internal/hostile"
	"github.com/idem-run/idem/internal/sendonce"
)

// dropper is an HTTP/1.1 upstream on a raw socket that counts every
// request it reads as an effect, answers the first request of each
// connection (keeping it alive) and drops the connection, unanswered,
// after reading the second.
type dropper struct {
	url     string
	effects atomic.Int32
}

func startDropper(t *testing.T) *dropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	d := &dropper{url: "http://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go d.serve(c)
		}
	}()
	return d
}

func (d *dropper) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		d.effects.Add(1)
		if n == 2 {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

// TestHoldHTTP1: on a kept-alive connection dropped after the request was
// read, the transport re-sends an unheld GET or keyed POST on a new
// connection (one more effect, and the caller sees a success); a held
// one is sent once and fails.
func TestHoldHTTP1(t *testing.T) {
	cases := []struct {
		name string
		req  func(url string) *http.Request
	}{
		{"GET", func(url string) *http.Request {
			r, _ := http.NewRequest("GET", url+"/charge", nil)
			return r
		}},
		{"POST with Idempotency-Key", func(url string) *http.Request {
			r, _ := http.NewRequest("POST", url+"/charge", bytes.NewReader([]byte(`{"amount":1}`)))
			r.Header.Set("Idempotency-Key", "k-1")
			return r
		}},
		{"DELETE without a body", func(url string) *http.Request {
			r, _ := http.NewRequest("DELETE", url+"/charge", nil)
			r.Header.Set("X-Idempotency-Key", "k-1")
			return r
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, held := range []bool{false, true} {
				d := startDropper(t)
				tr := http.DefaultTransport.(*http.Transport).Clone()
				tr.MaxConnsPerHost = 1 // the second request waits for the first's connection
				client := &http.Client{Transport: tr}
				send := func() error {
					r := tc.req(d.url)
					if held {
						sendonce.Hold(r)
					}
					resp, err := client.Do(r)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body) // read to the end: the connection stays alive
						resp.Body.Close()
					}
					return err
				}
				if err := send(); err != nil {
					t.Fatalf("held=%v: first request: %v", held, err)
				}
				err := send()
				got := d.effects.Load()
				switch {
				case !held && (err != nil || got != 3):
					t.Fatalf("unheld: err %v, %d effects; want the transport's re-send (3 effects, no error): the test no longer shows what Hold prevents", err, got)
				case held && (err == nil || got != 2):
					t.Fatalf("held: err %v, %d effects; want 2 effects and the dropped request's error", err, got)
				}
			}
		})
	}
}

// TestHoldHTTP1Wire: a held request without a body reaches the upstream
// as it would have: no body, and Content-Length: 0 only where the method
// takes one.
func TestHoldHTTP1Wire(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type seen struct {
		length int64
		te     []string
		body   string
	}
	got := make(chan seen, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err == nil {
				b, _ := io.ReadAll(req.Body)
				got <- seen{req.ContentLength, req.TransferEncoding, string(b)}
				_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
			}
			c.Close()
		}
	}()
	for _, method := range []string{"GET", "HEAD", "DELETE", "OPTIONS", "POST"} {
		r, _ := http.NewRequest(method, "http://"+ln.Addr().String()+"/x", nil)
		sendonce.Hold(r)
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		resp.Body.Close()
		s := <-got
		if s.body != "" || (method != "POST" && (s.length != 0 || len(s.te) != 0)) {
			t.Fatalf("%s: the upstream saw length %d, transfer-encoding %v, body %q", method, s.length, s.te, s.body)
		}
	}
}

// TestHoldHTTP2: an HTTP/2 upstream (prior knowledge) that resets every
// stream with PROTOCOL_ERROR after reading its headers, or answers GOAWAY
// saying it processed none: the transport re-sends an unheld request at
// once; a held one is sent once.
func TestHoldHTTP2(t *testing.T) {
	for _, goAway := range []bool{false, true} {
		for _, held := range []bool{false, true} {
			testHoldHTTP2(t, goAway, held)
		}
	}
}

func testHoldHTTP2(t *testing.T, goAway, held bool) {
	up, err := hostile.NewResettingHTTP2()
	if err != nil {
		t.Fatal(err)
	}
	up.GoAway = goAway
	second := make(chan struct{})
	up.OnEffect = func(n int32) {
		if n == 2 {
			close(second)
		}
	}
	up.Start()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "GET", up.URL+"/charge", nil)
	if held {
		sendonce.Hold(r)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(r)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if held {
		if err := <-done; err == nil {
			t.Fatalf("held (GOAWAY %v): no error; want the stream's", goAway)
		}
		if n := up.Effects(); n != 1 {
			t.Fatalf("held (GOAWAY %v): %d effects, want 1", goAway, n)
		}
	} else {
		select {
		case <-second: // the transport's re-send, which Hold prevents
		case err := <-done:
			t.Fatalf("unheld (GOAWAY %v): the request ended (%v) after %d effects without a re-send: the test no longer shows what Hold prevents", goAway, err, up.Effects())
		}
		cancel()
		<-done
	}
	cancel()
	tr.CloseIdleConnections()
	up.Close()
}
