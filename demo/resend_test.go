package demo

import (
	"net/http"
	"testing"
	"time"

	"github.com/idem-run/idem/internal/hostile"
)

// TestWebhookDeliveryIsSentOnce: a receiver speaking HTTP/2 that resets
// the delivery's stream after reading it gets the delivery once, recorded
// as failed. Before issue 33 item 1 the HTTP/2 transport re-sent the
// rewindable body by itself, again and again: 15,114 deliveries within the
// 5-second timeout (one run).
func TestWebhookDeliveryIsSentOnce(t *testing.T) {
	rcv, err := hostile.NewResettingHTTP2()
	if err != nil {
		t.Fatal(err)
	}
	rcv.Start()
	t.Cleanup(func() { rcv.Close() })
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	e := newTestEnv(t, stores["sqlite"](t), Config{HTTPClient: &http.Client{Transport: tr, Timeout: 5 * time.Second}, WebhookLoopback: true})
	createBusiness(t, e, "quillby")
	w := createWebhook(t, e, rcv.URL+"/hooks")
	var d Delivery
	e.call(t, req{op: "webhook.trigger", path: map[string]string{"slug": "quillby", "id": w.ID}, body: `{"type":"payment.failed"}`, key: "k-1"}).
		must(t, 200, "").into(t, &d)
	if n := rcv.Effects(); n != 1 || d.Delivered || d.Outcome != "failed" {
		t.Fatalf("the receiver read %d deliveries, recorded %+v; want 1, failed", n, d)
	}
}
