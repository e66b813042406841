package sendonce_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-run/idem/internal/hostile"
	"github.com/idem-run/idem/internal/sendonce"
)

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
		{"POST without a body, with Idempotency-Key", func(url string) *http.Request {
			r, _ := http.NewRequest("POST", url+"/charge", nil)
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
				d, err := hostile.NewDroppingHTTP1()
				if err != nil {
					t.Fatal(err)
				}
				d.Start()
				defer d.Close()
				tr := http.DefaultTransport.(*http.Transport).Clone()
				tr.MaxConnsPerHost = 1 // the second request waits for the first's connection
				client := &http.Client{Transport: tr}
				send := func() error {
					r := tc.req(d.URL)
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
				err = send()
				got := d.Effects()
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

// TestHoldHTTP1Wire: a held request without a body reaches an upstream
// as it would have: no body, no chunks; Content-Length: 0 where Go sends
// one (POST over http), none over https (where the request may go by
// HTTP/2 and needs the empty body); an HTTP/2 upstream answers it.
func TestHoldHTTP1Wire(t *testing.T) {
	type seen struct {
		length string
		te     []string
		body   string
	}
	got := make(chan seen, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get("Content-Length"), r.TransferEncoding, string(b)}
		w.WriteHeader(http.StatusNoContent)
	})
	plain, tls := httptest.NewServer(handler), httptest.NewTLSServer(handler)
	defer plain.Close()
	defer tls.Close()
	h2 := httptest.NewUnstartedServer(handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	for _, tc := range []struct {
		srv    *httptest.Server
		method string
		length string
	}{
		{plain, "GET", ""}, {plain, "HEAD", ""}, {plain, "DELETE", ""}, {plain, "OPTIONS", ""}, {plain, "POST", "0"}, {plain, "PUT", "0"},
		{tls, "GET", ""}, {tls, "DELETE", ""}, {tls, "POST", ""}, {tls, "PATCH", ""},
		{h2, "GET", ""}, {h2, "POST", ""},
	} {
		r, _ := http.NewRequest(tc.method, tc.srv.URL+"/x", nil)
		sendonce.Hold(r)
		resp, err := tc.srv.Client().Do(r)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.srv.URL, err)
		}
		resp.Body.Close()
		if tc.srv == h2 && resp.ProtoMajor != 2 {
			t.Fatalf("%s %s: answered in %s, want HTTP/2", tc.method, tc.srv.URL, resp.Proto)
		}
		if s := <-got; s.body != "" || s.length != tc.length || len(s.te) != 0 {
			t.Fatalf("%s %s: the upstream saw Content-Length %q, transfer-encoding %v, body %q; want Content-Length %q and no chunks",
				tc.method, tc.srv.URL, s.length, s.te, s.body, tc.length)
		}
	}
}

// TestHoldHTTP2: an HTTP/2 upstream that resets every stream with
// PROTOCOL_ERROR after reading its headers, or answers GOAWAY saying it
// processed none: the transport re-sends an unheld request at once; a
// held one is sent once. A GET over prior-knowledge HTTP/2, and a POST
// without a body over TLS (the case Hold gives an empty body for).
func TestHoldHTTP2(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		tls    bool
	}{{"GET, h2c", "GET", false}, {"POST without a body, h2 over TLS", "POST", true}} {
		for _, goAway := range []bool{false, true} {
			for _, held := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s, GOAWAY %v, held %v", tc.name, goAway, held), func(t *testing.T) {
					testHoldHTTP2(t, tc.method, tc.tls, goAway, held)
				})
			}
		}
	}
}

func testHoldHTTP2(t *testing.T, method string, useTLS, goAway, held bool) {
	up, err := hostile.NewResettingHTTP2()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	up.GoAway = goAway
	second := make(chan struct{})
	up.OnEffect = func(n int32) {
		if n == 2 {
			close(second)
		}
	}
	var tr *http.Transport
	if useTLS {
		// Borrow httptest's certificate (valid for 127.0.0.1) and a
		// client that trusts it.
		srv := httptest.NewUnstartedServer(nil)
		srv.EnableHTTP2 = true
		srv.StartTLS()
		defer srv.Close()
		up.TLS = srv.TLS.Clone()
		up.TLS.NextProtos = []string{"h2"}
		tr = srv.Client().Transport.(*http.Transport).Clone()
		tr.ForceAttemptHTTP2 = true
	} else {
		tr = http.DefaultTransport.(*http.Transport).Clone()
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	defer tr.CloseIdleConnections()
	up.Start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, method, up.URL+"/charge", nil)
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
			t.Fatal("held: no error; want the stream's")
		}
		if n := up.Effects(); n != 1 {
			t.Fatalf("held: %d effects, want 1", n)
		}
		return
	}
	select {
	case <-second: // the transport's re-send, which Hold prevents
	case err := <-done:
		t.Fatalf("unheld: the request ended (%v) after %d effects without a re-send: the test no longer shows what Hold prevents", err, up.Effects())
	}
	cancel()
	<-done
}
