package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
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
	s := startServerWith(t, sqliteStore, pipeline.Config{DecodeBudget: held << 10, AdmissionWait: -1})
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

// TestSlowUploadsLockNobodyOut: bodies that declare the whole body limit
// and then send nothing hold only their first share of the decode budget,
// not what they declared, so another principal's small call and a bodiless
// read still run at once; the slow bodies finish when they arrive (issue
// 28, item 2: four sockets declaring 1 MiB at 1 byte/s held the whole
// budget and every other caller got 429).
func TestSlowUploadsLockNobodyOut(t *testing.T) {
	const limit = 1 << 20
	// Room for the four stalled bodies' first shares and one more call.
	s := startServerWith(t, sqliteStore, pipeline.Config{DecodeBudget: 5 << 10, AdmissionWait: -1})
	const create = "/v1/shops/acme/widgets"
	var stalled []*heldBody
	done := make(chan *httptest.ResponseRecorder, 4)
	for i := range 4 {
		b := newHeldBody(fmt.Sprintf(`{"name":"slow-%d"}`, i))
		stalled = append(stalled, b)
		go func() { done <- s.serveDirect("POST", create, tokenAgent, fmt.Sprint("k-slow-", i), b, limit) }()
		select {
		case <-b.reading:
		case rec := <-done:
			t.Fatalf("slow body %d was refused before it was read: %d %s", i, rec.Code, rec.Body)
		}
	}
	s.send(t, "POST", create, tokenAgent2, key("k-other"), `{"name":"other"}`).expect(t, 201, "")
	s.send(t, "GET", create, tokenAgent2, nil, "").expect(t, 200, "")
	for range 3 { // bodiless calls take nothing, however many
		s.send(t, "GET", "/v1/attempts/k-other", tokenAgent2, nil, "").expect(t, 200, "")
	}
	for _, b := range stalled {
		close(b.release)
	}
	for range stalled {
		if rec := <-done; rec.Code != 201 {
			t.Fatalf("a slow body = %d %s", rec.Code, rec.Body)
		}
	}
}

// TestBodyGrowsItsShare: a body larger than its first share takes more as
// it arrives and is read whole, within the limit; one that needs more
// than is free is refused RATE_LIMITED, and its key stays free.
func TestBodyGrowsItsShare(t *testing.T) {
	s := startServerWith(t, sqliteStore, pipeline.Config{DecodeBudget: 8 << 10, AdmissionWait: -1})
	const create = "/v1/shops/acme/widgets"
	body := `{"name":"` + strings.Repeat("n", 3<<10) + `"}` // 3 KiB, under the test server's 4 KiB limit
	rec := s.serveDirect("POST", create, tokenAgent, "k-big", io.NopCloser(strings.NewReader(body)), -1)
	if rec.Code != 201 || !strings.Contains(rec.Body.String(), strings.Repeat("n", 3<<10)) {
		t.Fatalf("a 3 KiB name = %d %.300s; want 201 with the whole name", rec.Code, rec.Body)
	}
	// With 7 of the 8 KiB held elsewhere, the body gets its first share
	// but cannot grow.
	held, err := s.runner.AdmitBody(t.Context(), 7<<10)
	if err != nil {
		t.Fatal(err)
	}
	rec = s.serveDirect("POST", create, tokenAgent2, "k-grow", io.NopCloser(strings.NewReader(body)), -1)
	held()
	if code, retryable := problemCode(t, rec); rec.Code != 429 || code != idem.CodeRateLimited || !retryable {
		t.Fatalf("a body that outgrew the free budget = %d %s", rec.Code, rec.Body)
	}
	s.send(t, "GET", "/v1/attempts/k-grow", tokenAgent2, nil, "").expect(t, 404, idem.CodeNotFound)
}

// TestExecutionBeyondBoundRefused: with MaxExecutions running, a new
// execution is answered 429 RATE_LIMITED before anything is stored, while
// a same-key request for the running one still answers 409 (it needs no
// execution); the refused key runs once there is room.
func TestExecutionBeyondBoundRefused(t *testing.T) {
	s := startServerWith(t, sqliteStore, pipeline.Config{MaxExecutions: 1, AdmissionWait: -1})
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

// timeoutBody fails as a connection does when the read deadline passes.
type timeoutBody struct{}

func (timeoutBody) Read([]byte) (int, error) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	return 0, &net.OpError{Op: "read", Net: "tcp", Source: addr, Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 51234}, Err: os.ErrDeadlineExceeded}
}

func (timeoutBody) Close() error { return nil }

// brokenBody ends before its declared length.
type brokenBody struct{}

func (brokenBody) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
func (brokenBody) Close() error             { return nil }

// TestSlowBodyAnswers408: a body cut by the read timeout answers
// 408 REQUEST_TIMEOUT (retryable, nothing stored), and no read error shows
// the connection's addresses.
func TestSlowBodyAnswers408(t *testing.T) {
	s := startServer(t, sqliteStore)
	rec := s.serveDirect("POST", "/v1/shops/acme/widgets", tokenAgent, "k-slow-body", timeoutBody{}, 100)
	if code, retryable := problemCode(t, rec); rec.Code != 408 || code != idem.CodeRequestTimeout || !retryable {
		t.Fatalf("timed-out body = %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "127.0.0.1") || strings.Contains(rec.Body.String(), "tcp") {
		t.Fatalf("408 shows the connection: %s", rec.Body)
	}
	rec = s.serveDirect("POST", "/v1/shops/acme/widgets", tokenAgent, "k-slow-body", brokenBody{}, 100)
	if code, _ := problemCode(t, rec); rec.Code != 400 || code != idem.CodeInvalidInput || strings.Contains(rec.Body.String(), "EOF") {
		t.Fatalf("cut body = %d %s", rec.Code, rec.Body)
	}
	s.send(t, "GET", "/v1/attempts/k-slow-body", tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
	s.send(t, "POST", "/v1/shops/acme/widgets", tokenAgent, key("k-slow-body"), `{"name":"a"}`).expect(t, 201, "")
}

// TestReadTimeoutOverTheWire: the same over a real connection whose
// server has a read timeout, with a client that stops sending mid-body.
func TestReadTimeoutOverTheWire(t *testing.T) {
	s := startServer(t, sqliteStore)
	ts := httptest.NewUnstartedServer(s.handler)
	ts.Config.ReadTimeout = 200 * time.Millisecond
	ts.Start()
	t.Cleanup(ts.Close)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/shops/acme/widgets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nIdempotency-Key: k-wire\r\nContent-Length: 100\r\n\r\n{\"name\":", tokenAgent)
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || !strings.Contains(string(raw), `"code":"REQUEST_TIMEOUT"`) || strings.Contains(string(raw), "127.0.0.1") {
		t.Fatalf("slow body over the wire = %d %s", resp.StatusCode, raw)
	}
	s.send(t, "GET", "/v1/attempts/k-wire", tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
}

// TestHeadOnGetRoutes: HEAD answers like GET on operation and system
// routes, without a body.
func TestHeadOnGetRoutes(t *testing.T) {
	s := startServer(t, sqliteStore)
	s.send(t, "POST", "/v1/shops/acme/widgets", tokenAgent, key("k-head"), `{"name":"a"}`).expect(t, 201, "")
	for _, tc := range []struct{ path, token string }{
		{"/v1/shops/acme/widgets", tokenAgent}, // an operation
		{"/v1/operations", ""},
		{"/openapi.json", ""},
		{"/healthz", ""},
		{"/readyz", ""},
		{"/v1/attempts/k-head", tokenAgent},
		{"/v1/approvals", tokenApprover},
		{"/v1/attempts/none", tokenAgent}, // a 404
		{"/v1/shops/acme/widgets", ""},    // a 401
	} {
		get := s.raw(t, "GET", tc.path, tc.token)
		head := s.raw(t, "HEAD", tc.path, tc.token)
		if head.status != get.status || len(head.raw) != 0 {
			t.Errorf("HEAD %s = %d with %d bytes, GET = %d", tc.path, head.status, len(head.raw), get.status)
		}
		for _, h := range []string{"Content-Type", "Content-Length", "WWW-Authenticate"} {
			if head.header.Get(h) != get.header.Get(h) {
				t.Errorf("HEAD %s: %s = %q, GET has %q", tc.path, h, head.header.Get(h), get.header.Get(h))
			}
		}
		if get.header.Get("Content-Length") != fmt.Sprint(len(get.raw)) {
			t.Errorf("GET %s: Content-Length %q for %d bytes", tc.path, get.header.Get("Content-Length"), len(get.raw))
		}
	}
}

// raw sends a request without decoding the answer.
func (s *server) raw(t *testing.T, method, path, token string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	a.raw, _ = io.ReadAll(resp.Body)
	return a
}

// TestTwoAuthorizationHeadersRefused: two Authorization headers answer 401
// whatever they hold, and nothing runs.
func TestTwoAuthorizationHeadersRefused(t *testing.T) {
	s := startServer(t, sqliteStore)
	for name, values := range map[string][]string{
		"both valid":     {"Bearer " + tokenAgent, "Bearer " + tokenAgent2},
		"valid first":    {"Bearer " + tokenAgent, "Bearer wrong"},
		"same twice":     {"Bearer " + tokenAgent, "Bearer " + tokenAgent},
		"empty then one": {"", "Bearer " + tokenAgent},
	} {
		t.Run(name, func(t *testing.T) {
			a := s.send(t, "POST", "/v1/shops/acme/widgets", "", hdr{"Authorization": values, "Idempotency-Key": {"k-two-auth"}}, `{"name":"a"}`).expect(t, 401, idem.CodeUnauthenticated)
			if a.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
			s.send(t, "GET", "/v1/approvals", "", hdr{"Authorization": values}, "").expect(t, 401, idem.CodeUnauthenticated)
		})
	}
	if s.runs.Load() != 0 {
		t.Fatalf("handler ran %d times", s.runs.Load())
	}
}
