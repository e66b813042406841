package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem/webhooksig"
)

// A webhook trigger retried with the same key gives exactly one delivery
// at a real local receiver, and its signature verifies.
func TestWebhookTriggerDeliversOnce(t *testing.T) {
	type delivery struct {
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	var got []delivery
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, delivery{r.Header.Clone(), body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	dir := t.TempDir()
	s := serve(t, stores["sqlite"](t, dir), dir, "--webhook-loopback") // the receiver is local
	s.do(t, "POST", "/v1/businesses", "demo-agent", `{"slug":"hooked","name":"Hooked"}`, "Idempotency-Key", "create-hooked").want(t, 201, "")
	hook := s.do(t, "POST", "/v1/businesses/hooked/webhooks", "demo-agent",
		`{"url":"`+receiver.URL+`/hook","events":["payment.failed"]}`, "Idempotency-Key", "hook-1").want(t, 201, "")
	secret, _ := hook.get("data.secret").(string)
	id, _ := hook.get("data.id").(string)
	if secret == "" || id == "" {
		t.Fatalf("webhook.create = %s", hook.raw)
	}
	path := "/v1/businesses/hooked/webhooks/" + id + "/trigger"
	first := s.do(t, "POST", path, "demo-agent", `{"type":"payment.failed"}`, "Idempotency-Key", "trigger-1").want(t, 200, "")
	again := s.do(t, "POST", path, "demo-agent", `{"type":"payment.failed"}`, "Idempotency-Key", "trigger-1").want(t, 200, "")
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.get("data.id").(string)) != first.get("data.id") {
		t.Fatalf("trigger replay = %s", again.raw)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("the receiver got %d deliveries, want 1", len(got))
	}
	d := got[0]
	if err := webhooksig.Verify(secret, d.header.Get("Idem-Signature"), d.body, time.Now(), 5*time.Minute); err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	if d.header.Get("Idem-Delivery-Id") != first.get("data.id") || d.header.Get("Idem-Event-Type") != "payment.failed" {
		t.Fatalf("delivery headers = %v", d.header)
	}
	deliveries := s.do(t, "GET", "/v1/businesses/hooked/webhooks/"+id+"/deliveries", "demo-agent", "").want(t, 200, "")
	if list, _ := deliveries.get("data.deliveries").([]any); len(list) != 1 {
		t.Fatalf("deliveries = %s", deliveries.raw)
	}
}
