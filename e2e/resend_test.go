package e2e

import (
	"bufio"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hostileup "github.com/idem-run/idem/internal/hostile" // e2e has a func hostile
)

// startDroppingUpstream is a hostile HTTP/1.1 upstream on a raw socket
// (issue 33 item 1, internal/hostile): it answers the first request of
// each connection and keeps it alive, and drops the connection, unanswered,
// after reading the second. Every request but the read GET /charges is an
// effect.
func startDroppingUpstream(t *testing.T) *hostileup.DroppingHTTP1 {
	t.Helper()
	u, err := hostileup.NewDroppingHTTP1()
	if err != nil {
		t.Fatal(err)
	}
	u.Answer = func(r *http.Request) (string, bool) {
		if r.URL.Path == "/charges" {
			return `{"charges":[]}`, false
		}
		return fmt.Sprintf(`{"charge":%q}`, r.URL.Path), true
	}
	u.Start()
	t.Cleanup(func() { u.Close() })
	return u
}

// resendDocument declares a GET that writes (the overlay says so), a
// fresh read and a POST with a header parameter.
const resendDocument = `{"openapi":"3.0.3","info":{"title":"charges","version":"1"},"paths":{
"/charges/{id}":{"get":{"operationId":"charge","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],
  "responses":{"200":{"description":"charged","content":{"application/json":{"schema":{"type":"object"}}}}}}},
"/tags":{"post":{"operationId":"tag","parameters":[{"name":"X-Tenant","in":"header","required":true,"schema":{"type":"string"}}],
  "requestBody":{"content":{"application/json":{"schema":{"type":"object","properties":{"name":{"type":"string"}}}}}},
  "responses":{"200":{"description":"tagged","content":{"application/json":{"schema":{"type":"object"}}}}}}},
"/charges":{"get":{"operationId":"listCharges","responses":{"200":{"description":"the charges","content":{"application/json":{"schema":{"type":"object"}}}}}}}}}`

// TestProxyNeverResendsAWrite: idem proxy in front of an upstream that
// drops kept-alive connections after reading the request. N keyed calls
// of a GET declared sideEffect: write make exactly N upstream effects;
// the caller of each dropped one is told it may have executed (500, then
// 409 indeterminate on a same-key retry), never a 200 of a second run.
// Before issue 33 item 1, net/http re-sent every dropped GET on a new
// connection: 4 calls made 7 effects, all answered 200.
func TestProxyNeverResendsAWrite(t *testing.T) {
	up := startDroppingUpstream(t)
	dir := writeServerDir(t, proxyToken, proxyApprover, `charge:
  kind: same_key_replay
  reconcile: listCharges
  rationale: A charge replays by key.
  sideEffect: write
`)
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, []byte(resendDocument), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), up.URL, "--openapi", doc)

	const calls = 6
	var ok, indeterminate []int
	for i := 1; i <= calls; i++ {
		r := p.do(t, "GET", fmt.Sprintf("/charges/c%d", i), proxyToken, "", "Idempotency-Key", fmt.Sprintf("charge-%d", i))
		switch {
		case r.status == 200:
			ok = append(ok, i)
		case r.status == 500 && r.get("code") == "EXECUTION_FAILED" && r.get("retryable") == false &&
			r.get("details.reconcile") == "listCharges" && strings.Contains(fmt.Sprint(r.get("detail")), "may have executed"):
			indeterminate = append(indeterminate, i)
		default:
			t.Fatalf("call %d: %d %s", i, r.status, r.raw)
		}
	}
	if n := up.Effects(); n != calls {
		t.Fatalf("%d keyed calls made %d upstream effects (%d answered, %d dropped); want exactly %d: something below idem re-sent a write",
			calls, n, up.Answered(), up.Dropped(), calls)
	}
	if len(indeterminate) == 0 || int32(len(indeterminate)) != up.Dropped() || int32(len(ok)) != up.Answered() {
		t.Fatalf("%d answered 200 and %d indeterminate; the upstream answered %d and dropped %d", len(ok), len(indeterminate), up.Answered(), up.Dropped())
	}
	for _, i := range indeterminate {
		p.do(t, "GET", fmt.Sprintf("/charges/c%d", i), proxyToken, "", "Idempotency-Key", fmt.Sprintf("charge-%d", i)).
			want(t, 409, "IDEMPOTENCY_RESULT_INDETERMINATE")
	}
	if n := up.Effects(); n != calls {
		t.Fatalf("same-key retries of the indeterminate calls made %d more effects", n-calls)
	}

	// A fresh read may still be re-sent by the transport on a dropped
	// kept-alive connection: every read is answered.
	for i := 0; i < 4; i++ {
		r := p.do(t, "GET", "/charges", proxyToken, "")
		if r.status != 200 || strings.TrimSpace(string(r.raw)) != `{"charges":[]}` {
			t.Fatalf("read %d: %d %s", i, r.status, r.raw)
		}
	}
}

// TestProxyHeaderArgumentWithCRLF: over MCP (the SDK client against the
// built binary) a proxied header parameter holding CR or LF is 400
// INVALID_INPUT naming the argument, not retryable, and nothing reaches
// the upstream (issue 33 item 8; before: 503 UPSTREAM_UNAVAILABLE,
// retryable). HTTP cannot carry such a value: the server refuses the
// request before idem reads it.
func TestProxyHeaderArgumentWithCRLF(t *testing.T) {
	up := startDroppingUpstream(t)
	dir := writeServerDir(t, proxyToken, proxyApprover, "tag:\n  kind: same_key_replay\n  reconcile: listCharges\n  rationale: A tag replays by key.\n")
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, []byte(resendDocument), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), up.URL, "--openapi", doc)
	cs := mcpHTTP(t, p, proxyToken)
	for name, value := range map[string]string{"CR": "acme\rX-Evil: 1", "LF": "acme\nX-Evil: 1", "CRLF": "acme\r\nX-Evil: 1"} {
		sc, res := toolCall(t, cs, "tag", map[string]any{"X-Tenant": value, "name": "a", "idempotencyKey": "t-" + name})
		raw, _ := json.Marshal(sc)
		if !res.IsError || !strings.Contains(string(raw), "INVALID_INPUT") || strings.Contains(string(raw), "UPSTREAM_UNAVAILABLE") ||
			!strings.Contains(string(raw), "X-Tenant") || strings.Contains(string(raw), `"retryable":true`) {
			t.Fatalf("%s in X-Tenant over MCP: %s", name, raw)
		}
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = fmt.Fprintf(c, "POST /tags HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nIdempotency-Key: t-http\r\nX-Tenant: acme\rX-Evil: 1\r\n"+
		"Content-Type: application/json\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{\"name\":\"a\"}", proxyToken)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a CR in X-Tenant over HTTP: %d", resp.StatusCode)
	}
	if n := up.Effects(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// TestProxyKeyInHeaderAndBody: a proxied call (whose upstream schema
// takes other body members) with an Idempotency-Key header and a
// different idempotencyKey body member is refused as MCP refuses two
// keys, before anything reaches the upstream (issue 33, Low). Before, it
// ran under the header's key.
func TestProxyKeyInHeaderAndBody(t *testing.T) {
	up := startDroppingUpstream(t)
	dir := writeServerDir(t, proxyToken, proxyApprover, "tag:\n  kind: same_key_replay\n  reconcile: listCharges\n  rationale: A tag replays by key.\n")
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, []byte(resendDocument), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), up.URL, "--openapi", doc)
	r := p.do(t, "POST", "/tags", proxyToken, `{"name":"a","idempotencyKey":"k-body"}`, "Idempotency-Key", "k-header", "X-Tenant", "acme").
		want(t, 400, "IDEMPOTENCY_KEY_INVALID")
	if d, _ := r.get("detail").(string); !strings.Contains(d, "Idempotency-Key header") || !strings.Contains(d, "body member idempotencyKey") {
		t.Fatalf("the problem does not name both places: %s", r.raw)
	}
	if n := up.Effects(); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// TestWebhookDeliveryIsSentOnceOverHTTP2: idem serve --demo delivers a
// webhook over HTTP/2 (TLS, the receiver's certificate trusted through
// SSL_CERT_FILE) to a receiver that resets the stream after reading it:
// the receiver reads it once and the delivery is recorded failed (issue 33
// item 1). Before, the binary's HTTP/2 transport re-sent it by itself
// until the delivery's 5-second timeout.
func TestWebhookDeliveryIsSentOnceOverHTTP2(t *testing.T) {
	cert := httptest.NewUnstartedServer(nil)
	cert.EnableHTTP2 = true
	cert.StartTLS()
	defer cert.Close()
	rcv, err := hostileup.NewResettingHTTP2()
	if err != nil {
		t.Fatal(err)
	}
	rcv.TLS = cert.TLS.Clone()
	rcv.TLS.NextProtos = []string{"h2"}
	rcv.Start()
	t.Cleanup(func() { rcv.Close() })
	dir := t.TempDir()
	pemFile := filepath.Join(dir, "receiver.pem")
	if err := os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", pemFile) // the server trusts the receiver

	s := serve(t, stores["sqlite"](t, dir), dir, "--webhook-loopback")
	s.do(t, "POST", "/v1/businesses", "demo-agent", `{"slug":"reset","name":"Reset"}`, "Idempotency-Key", "create-reset").want(t, 201, "")
	hook := s.do(t, "POST", "/v1/businesses/reset/webhooks", "demo-agent",
		`{"url":"`+rcv.URL+`/hook","events":["payment.failed"]}`, "Idempotency-Key", "hook-reset").want(t, 201, "")
	id, _ := hook.get("data.id").(string)
	r := s.do(t, "POST", "/v1/businesses/reset/webhooks/"+id+"/trigger", "demo-agent", `{"type":"payment.failed"}`, "Idempotency-Key", "trigger-reset").
		want(t, 200, "")
	if n := rcv.Effects(); n != 1 || r.get("data.outcome") != "failed" {
		t.Fatalf("the receiver read the delivery %d times; delivery %s", n, r.raw)
	}
}

// TestProxyNeverResendsAWriteOverHTTP2: idem proxy in front of an HTTP/2
// upstream (TLS, trusted through SSL_CERT_FILE) that resets each stream
// after reading it: a keyed call of a GET declared a write reaches it
// once and is indeterminate (issue 33 item 1). Before, the binary's
// HTTP/2 transport re-sent it until the attempt's timeout.
func TestProxyNeverResendsAWriteOverHTTP2(t *testing.T) {
	cert := httptest.NewUnstartedServer(nil)
	cert.EnableHTTP2 = true
	cert.StartTLS()
	defer cert.Close()
	up, err := hostileup.NewResettingHTTP2()
	if err != nil {
		t.Fatal(err)
	}
	up.TLS = cert.TLS.Clone()
	up.TLS.NextProtos = []string{"h2"}
	up.Start()
	t.Cleanup(func() { up.Close() })
	dir := writeServerDir(t, proxyToken, proxyApprover, `charge:
  kind: same_key_replay
  reconcile: listCharges
  rationale: A charge replays by key.
  sideEffect: write
  timeoutMs: 2000
`)
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, []byte(resendDocument), 0o600); err != nil {
		t.Fatal(err)
	}
	pemFile := filepath.Join(dir, "upstream.pem")
	if err := os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", pemFile) // the proxy trusts the upstream
	p := startProxy(t, dir, "sqlite:"+filepath.Join(dir, "idem.db"), up.URL, "--openapi", doc)
	r := p.do(t, "GET", "/charges/c1", proxyToken, "", "Idempotency-Key", "charge-h2")
	if n := up.Effects(); n != 1 || r.status != 500 || r.get("code") != "EXECUTION_FAILED" {
		t.Fatalf("the upstream read the call %d times; answer %d %s", n, r.status, r.raw)
	}
	p.do(t, "GET", "/charges/c1", proxyToken, "", "Idempotency-Key", "charge-h2").want(t, 409, "IDEMPOTENCY_RESULT_INDETERMINATE")
	if n := up.Effects(); n != 1 {
		t.Fatalf("the same-key retry reached the upstream: %d effects", n)
	}
}
