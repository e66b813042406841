package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idem"
)

// heldBody is a request body that blocks its first Read until released,
// and says when the handler started reading it.
type heldBody struct {
	data    io.Reader
	reading chan struct{} // closed at the first Read
	release chan struct{}
	started atomic.Bool
}

func newHeldBody(s string) *heldBody {
	return &heldBody{data: strings.NewReader(s), reading: make(chan struct{}), release: make(chan struct{})}
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.started.CompareAndSwap(false, true) {
		close(b.reading)
		<-b.release
	}
	return b.data.Read(p)
}

func (b *heldBody) Close() error { return nil }

// serveDirect serves one request on the handler itself (no listener), so
// that the test controls the body reader.
func (s *server) serveDirect(method, path, token, idemKey string, body io.ReadCloser, length int64) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, body)
	req.ContentLength = length
	req.Header.Set("Authorization", "Bearer "+token)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, req)
	return rec
}

func problemCode(t *testing.T, rec *httptest.ResponseRecorder) (idem.Code, bool) {
	t.Helper()
	var p struct {
		Code      idem.Code `json:"code"`
		Retryable bool      `json:"retryable"`
		Detail    string    `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("answer %d %q is not JSON: %v", rec.Code, rec.Body, err)
	}
	return p.Code, p.Retryable
}

// TestBodyBeyondDecodeBudgetRefusedUnread: with the decode budget full of
// bodies being read, the next body is answered 429 RATE_LIMITED with
// Retry-After without being read; nothing is stored for its key, which
// then runs normally (SPEC §6.8).
func TestBodyBeyondDecodeBudgetRefusedUnread(t *testing.T) {
	const held = 2
	// Every small body counts 1 KiB: the budget admits exactly held bodies.
	s := startServerWith(t, sqliteStore, idem.RunnerConfig{DecodeBudget: held << 10, AdmissionWait: -1})
	const create = "/v1/shops/acme/widgets"
	var bodies []*heldBody
	done := make(chan *httptest.ResponseRecorder, held)
	for i := range held {
		body := fmt.Sprintf(`{"name":"held-%d"}`, i)
		b := newHeldBody(body)
		bodies = append(bodies, b)
		go func() {
			done <- s.serveDirect("POST", create, tokenAgent, fmt.Sprint("k-held-", i), b, int64(len(body)))
		}()
		<-b.reading // admitted: the handler reads the body
	}

	refused := newHeldBody(`{"name":"refused"}`)
	close(refused.release)
	rec := s.serveDirect("POST", create, tokenAgent, "k-refused", refused, int64(len(`{"name":"refused"}`)))
	if code, retryable := problemCode(t, rec); rec.Code != 429 || code != idem.CodeRateLimited || !retryable {
		t.Fatalf("body beyond the budget = %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After: %v", rec.Header())
	}
	if refused.started.Load() {
		t.Fatal("the refused body was read")
	}
	s.send(t, "GET", "/v1/attempts/k-refused", tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)

	for _, b := range bodies {
		close(b.release)
	}
	for range held {
		if rec := <-done; rec.Code != 201 {
			t.Fatalf("held body = %d %s", rec.Code, rec.Body)
		}
	}
	// The budget is back, and the refused key was not consumed.
	runs := s.runs.Load()
	s.send(t, "POST", create, tokenAgent, key("k-refused"), `{"name":"refused"}`).expect(t, 201, "")
	if s.runs.Load() != runs+1 {
		t.Fatal("the refused key did not run when sent again")
	}
}

// TestExecutionBeyondBoundRefused: with MaxExecutions running, a new
// execution is answered 429 RATE_LIMITED before anything is stored, while
// a same-key request for the running one still answers 409 (it needs no
// execution); the refused key runs once there is room.
func TestExecutionBeyondBoundRefused(t *testing.T) {
	s := startServerWith(t, sqliteStore, idem.RunnerConfig{MaxExecutions: 1, AdmissionWait: -1})
	const create = "/v1/shops/acme/widgets"
	release := sync.OnceFunc(func() { close(s.release) })
	t.Cleanup(release)
	slow := make(chan answer, 1)
	go func() { slow <- s.send(t, "POST", create, tokenAgent, key("k-slow"), `{"name":"slow"}`) }()
	for i := 0; s.runs.Load() == 0; i++ {
		if i > 10000 {
			t.Fatal("the slow execution did not start")
		}
		time.Sleep(time.Millisecond)
	}
	a := s.send(t, "POST", create, tokenAgent, key("k-second"), `{"name":"second"}`).expect(t, 429, idem.CodeRateLimited)
	if a.header.Get("Retry-After") == "" || !a.body.Retryable || a.body.Meta.Operation != "widget.create" {
		t.Fatalf("429 = %s %v", a.raw, a.header)
	}
	s.send(t, "POST", create, tokenAgent, key("k-slow"), `{"name":"slow"}`).expect(t, 409, idem.CodeIdempotencyKeyInFlight)
	s.send(t, "GET", "/v1/attempts/k-second", tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
	if s.runs.Load() != 1 {
		t.Fatalf("handler runs = %d, want 1", s.runs.Load())
	}
	release()
	if a := <-slow; a.status != 201 {
		t.Fatalf("slow = %d %s", a.status, a.raw)
	}
	s.send(t, "POST", create, tokenAgent, key("k-second"), `{"name":"second"}`).expect(t, 201, "")
}
