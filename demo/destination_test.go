package demo

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestRefuseDestination(t *testing.T) {
	rows := []struct {
		name, address string
		loopback      bool
		refused       bool
	}{
		{"IPv4 loopback", "127.0.0.1:80", false, true},
		{"IPv4 loopback, another one", "127.8.9.10:80", false, true},
		{"IPv6 loopback", "[::1]:80", false, true},
		{"IPv4-mapped loopback", "[::ffff:127.0.0.1]:80", false, true},
		{"loopback allowed", "127.0.0.1:80", true, false},
		{"unspecified", "0.0.0.0:80", true, true},
		{"IPv6 unspecified", "[::]:80", true, true},
		{"metadata service", "169.254.169.254:80", true, true},
		{"IPv6 link-local", "[fe80::1]:80", true, true},
		{"public", "93.184.216.34:443", false, false},
		{"private network", "10.0.0.5:443", false, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if err := refuseDestination(r.address, r.loopback); (err != nil) != r.refused {
				t.Fatalf("refuseDestination(%s, loopback %v) = %v, want refused %v", r.address, r.loopback, err, r.refused)
			}
		})
	}
}

// TestWebhookToLoopbackIsRefusedAlike: without Config.WebhookLoopback a
// delivery to a loopback port is refused before connecting, and an open
// port (a live receiver) and a closed one are recorded alike, so that a
// caller cannot probe the server's own ports (issue 33, Low). Before, the
// open port's delivery arrived (delivered, 204) and the closed one's said
// "connection refused".
func TestWebhookToLoopbackIsRefusedAlike(t *testing.T) {
	var hits atomic.Int32
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(open.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	e := newTestEnv(t, stores["sqlite"](t), Config{})
	createBusiness(t, e, "quillby")
	deliver := func(url, key string) Delivery {
		w := createWebhook(t, e, url)
		var d Delivery
		e.call(t, req{op: "webhook.trigger", path: map[string]string{"slug": "quillby", "id": w.ID}, body: `{"type":"payment.failed"}`, key: key}).
			must(t, 200, "").into(t, &d)
		return d
	}
	a := deliver(open.URL+"/hooks", "k-open")
	b := deliver(closed+"/hooks", "k-closed")
	// The answers differ only by the URL the caller gave.
	same := func(d Delivery, url string) string {
		return strings.ReplaceAll(strings.ReplaceAll(d.Error, url, "URL"), strings.TrimPrefix(url, "http://"), "ADDR")
	}
	if hits.Load() != 0 || a.Delivered || b.Delivered || a.Outcome != "failed" || b.Outcome != "failed" ||
		a.ResponseStatus != 0 || b.ResponseStatus != 0 || same(a, open.URL) != same(b, closed) || !strings.Contains(a.Error, "--webhook-loopback") {
		t.Fatalf("open port: %+v\nclosed port: %+v\nthe receiver got %d", a, b, hits.Load())
	}
}
