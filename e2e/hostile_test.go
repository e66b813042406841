package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostile is one bad request against POST /v1/businesses (business.create,
// same_key_replay) with the key "hostile-N" unless the case sets its own
// headers.
type hostile struct {
	name    string
	method  string // POST unless set
	path    string // /v1/businesses unless set
	token   string // demo-agent unless set; "-" for none
	body    string
	headers []string // extra headers; the key header is added unless noKey
	noKey   bool
	status  int
	code    string
	// fieldErrors: the problem must carry details.errors.
	fieldErrors bool
}

// TestHostileInput sends a corpus of bad requests to `idem serve --demo` on
// SQLite: each gets a clear 4xx problem object, and nothing is stored (the
// key's attempt reads 404 afterwards, the business list is unchanged).
func TestHostileInput(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir)

	deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	deepArr := `{"slug":"deep","name":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`
	huge := `{"slug":"huge","name":"` + strings.Repeat("x", 2<<20) + `"}`
	digits := strings.Repeat("7", 2000)
	// 10,000 parameters fit the 64 KiB header limit only when short; Go's
	// net/url refuses to parse more than 10,000 (GODEBUG urlmaxqueryparams).
	many := func(n int) string { return strings.TrimSuffix(strings.Repeat("a=1&", n), "&") }
	cases := []hostile{
		{name: "2 MiB body", body: huge, status: 413, code: "REQUEST_TOO_LARGE"},
		{name: "object nested 10000 deep", body: deep, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "array nested 10000 deep", body: deepArr, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "invalid UTF-8 in a string", body: "{\"slug\":\"utf\",\"name\":\"bad \xff\xfe\"}", status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "invalid UTF-8 in a key", body: "{\"slug\":\"utf2\",\"n\xffame\":\"x\"}", status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "duplicate JSON keys", body: `{"slug":"dup","name":"A","name":"B"}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "duplicate JSON keys differing in case", body: `{"slug":"dupc","name":"A","Name":"B"}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "number beyond float64", body: `{"slug":"big","name":"x","extra":1e400}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "number beyond float64 as the name", body: `{"slug":"big2","name":1e400}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "2000-digit integer", body: `{"slug":"digits","name":` + digits + `}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "10000 query parameters", path: "/v1/businesses?" + many(10000), body: `{"slug":"params","name":"P"}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "10001 query parameters", path: "/v1/businesses?" + many(10001), body: `{"slug":"params1","name":"P"}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "10000 distinct query parameters", path: "/v1/businesses?" + distinct(10000), body: `{"slug":"params2","name":"P"}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "key of 256 characters", body: `{"slug":"k256","name":"K"}`, noKey: true, headers: []string{"Idempotency-Key", strings.Repeat("k", 256)}, status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
		{name: "key with a space", body: `{"slug":"ksp","name":"K"}`, noKey: true, headers: []string{"Idempotency-Key", "a b"}, status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
		{name: "key with a comma", body: `{"slug":"kcomma","name":"K"}`, noKey: true, headers: []string{"Idempotency-Key", "a,b"}, status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
		{name: "key with non-ASCII", body: `{"slug":"kna","name":"K"}`, noKey: true, headers: []string{"Idempotency-Key", "clé"}, status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
		{name: "empty key", body: `{"slug":"kempty","name":"K"}`, noKey: true, headers: []string{"Idempotency-Key", ""}, status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
		{name: "repeated key header", body: `{"slug":"krep","name":"K"}`, noKey: true, headers: []string{"Idempotency-Key", "rep-1", "Idempotency-Key", "rep-1"}, status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
		{name: "empty body", body: "", status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "body []", body: `[]`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: `body "x"`, body: `"x"`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "body null", body: `null`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "body 42", body: `42`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "trailing garbage", body: `{"slug":"trail","name":"T"} xyz`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "two objects", body: `{"slug":"two","name":"T"}{"slug":"two","name":"T"}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "truncated JSON", body: `{"slug":"trunc","name":"T"`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "unknown field", body: `{"slug":"unk","name":"U","admin":true}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "wrong type", body: `{"slug":"wt","name":{"x":1}}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "NUL in a string", body: `{"slug":"nul\u0000","name":"N"}`, status: 400, code: "INVALID_INPUT", fieldErrors: true},
		{name: "no token", token: "-", body: `{"slug":"anon","name":"A"}`, status: 401, code: "UNAUTHENTICATED"},
		{name: "unknown token", token: "nope", body: `{"slug":"anon2","name":"A"}`, status: 401, code: "UNAUTHENTICATED"},
		{name: "unknown route", path: "/v1/businesses/x/../../etc/passwd", method: "GET", noKey: true, status: 404, code: "NOT_FOUND"},
		{name: "wrong method", method: "DELETE", body: `{}`, status: 405, code: "METHOD_NOT_ALLOWED"},
	}
	before := s.do(t, "GET", "/v1/businesses", "demo-agent", "").want(t, 200, "")
	ledger := len(ledgerEffects(t, s, "demo-agent"))
	tried := 0
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("hostile-%d", i)
			method, path, token := c.method, c.path, c.token
			if method == "" {
				method = "POST"
			}
			if path == "" {
				path = "/v1/businesses"
			}
			switch token {
			case "":
				token = "demo-agent"
			case "-":
				token = ""
			}
			headers := c.headers
			if !c.noKey {
				headers = append([]string{"Idempotency-Key", key}, headers...)
			}
			r, err := s.try(method, path, token, c.body, headers...)
			if err != nil {
				t.Fatalf("transport: %v", err)
			}
			r.want(t, c.status, c.code)
			if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Errorf("Content-Type = %q", ct)
			}
			if d, _ := r.body["detail"].(string); d == "" || r.body["title"] == nil {
				t.Errorf("problem without title or detail: %s", r.raw)
			}
			if c.fieldErrors {
				if errs, _ := r.get("details.errors").([]any); len(errs) == 0 {
					t.Errorf("no details.errors: %s", r.raw)
				}
			}
			if len(r.raw) > 64<<10 {
				t.Errorf("answer is %d bytes: the bad input is echoed back", len(r.raw))
			}
			s.do(t, "GET", "/v1/attempts/"+key, "demo-agent", "").want(t, 404, "NOT_FOUND")
			for i := 0; i+1 < len(c.headers); i += 2 {
				if c.headers[i] == "Idempotency-Key" && c.headers[i+1] != "" {
					s.do(t, "GET", "/v1/attempts/"+url.PathEscape(c.headers[i+1]), "demo-agent", "").want(t, 404, "NOT_FOUND")
				}
			}
		})
		tried++
	}
	after := s.do(t, "GET", "/v1/businesses", "demo-agent", "").want(t, 200, "")
	if !bytes.Equal(stripMeta(before.raw), stripMeta(after.raw)) {
		t.Errorf("business list changed:\nbefore %s\nafter  %s", before.raw, after.raw)
	}
	if n := len(ledgerEffects(t, s, "demo-agent")); n != ledger {
		t.Errorf("gateway ledger went from %d to %d effects", ledger, n)
	}
	t.Logf("%d bad requests tried", tried)
}

// distinct returns n query parameters with distinct short names.
func distinct(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(strconv.FormatInt(int64(i), 36))
	}
	return b.String()
}

// stripMeta drops the "meta" member (execution ids differ per call).
func stripMeta(raw []byte) []byte {
	if i := bytes.Index(raw, []byte(`,"meta":`)); i >= 0 {
		return raw[:i]
	}
	return raw
}

// rawRequest sends bytes over a fresh connection and returns what the server
// answers (status, then headers and body as text), within 10 s.
func rawRequest(t *testing.T, s *server, req string) (status int, answer string) {
	t.Helper()
	u, _ := url.Parse(s.url)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var b strings.Builder
	resp.Header.Write(&b)
	return resp.StatusCode, b.String() + "\n" + string(body)
}

// TestHostileWire sends what Go's client refuses to send: CR/LF in the key
// header, bare CR, folded headers, oversized headers, and a slow client.
func TestHostileWire(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir)
	u, _ := url.Parse(s.url)
	post := func(keyLines, body string) string {
		return "POST /v1/businesses HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: Bearer demo-agent\r\nContent-Type: application/json\r\n" +
			keyLines + fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(body)) + body
	}
	before := s.do(t, "GET", "/v1/businesses", "demo-agent", "").want(t, 200, "")

	t.Run("CRLF in the key is a header of its own, never reflected", func(t *testing.T) {
		// On the wire, "a\r\nX-Injected: 1" ends the key header: the key is
		// "a" and X-Injected is an unrelated request header. The body is
		// invalid, so nothing is stored; the answer must not carry it.
		status, answer := rawRequest(t, s, post("Idempotency-Key: a\r\nX-Injected: 1\r\n", `{"slug":"inj"}`))
		if status != 400 || !strings.Contains(answer, "INVALID_INPUT") || strings.Contains(strings.ToLower(answer), "x-injected") {
			t.Fatalf("got %d:\n%s", status, answer)
		}
		s.do(t, "GET", "/v1/attempts/a", "demo-agent", "").want(t, 404, "NOT_FOUND")
	})
	t.Run("bare CR in the key", func(t *testing.T) {
		status, answer := rawRequest(t, s, post("Idempotency-Key: a\rX-Injected: 1\r\n", `{"slug":"inj2","name":"I"}`))
		if status != 400 || strings.Contains(strings.ToLower(answer), "x-injected") {
			t.Fatalf("got %d:\n%s", status, answer)
		}
	})
	t.Run("bare LF in the key", func(t *testing.T) {
		status, answer := rawRequest(t, s, post("Idempotency-Key: b\nX-Injected: 1\r\n", `{"slug":"inj3"}`))
		// Go reads a bare LF as a line end (RFC 9112 §2.2 allows it): the
		// key is "b" and X-Injected a header of its own; the body is
		// invalid, so nothing is stored.
		if status != 400 || strings.Contains(strings.ToLower(answer), "x-injected") {
			t.Fatalf("got %d:\n%s", status, answer)
		}
	})
	t.Run("folded key header", func(t *testing.T) {
		status, answer := rawRequest(t, s, post("Idempotency-Key: c\r\n X-Injected: 1\r\n", `{"slug":"inj4","name":"I"}`))
		if status != 400 {
			t.Fatalf("got %d:\n%s", status, answer)
		}
		s.do(t, "GET", "/v1/attempts/c", "demo-agent", "").want(t, 404, "NOT_FOUND")
	})
	t.Run("NUL in the key", func(t *testing.T) {
		status, answer := rawRequest(t, s, post("Idempotency-Key: d\x00e\r\n", `{"slug":"inj5","name":"I"}`))
		if status != 400 {
			t.Fatalf("got %d:\n%s", status, answer)
		}
	})
	t.Run("header over the size limit", func(t *testing.T) {
		status, answer := rawRequest(t, s, post("X-Big: "+strings.Repeat("b", 200<<10)+"\r\nIdempotency-Key: big\r\n", `{"slug":"bighdr","name":"B"}`))
		if status != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("got %d:\n%.300s", status, answer)
		}
		s.do(t, "GET", "/v1/attempts/big", "demo-agent", "").want(t, 404, "NOT_FOUND")
	})
	t.Run("slow headers are cut off", func(t *testing.T) {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		req := post("Idempotency-Key: slow\r\n", `{"slug":"slow","name":"S"}`)
		var cut time.Duration
		for i := 0; i < len(req); i++ {
			if _, err := c.Write([]byte{req[i]}); err != nil {
				cut = time.Since(start)
				break
			}
			// A read with a short deadline notices the server closing.
			c.SetReadDeadline(time.Now().Add(time.Second))
			var b [512]byte
			if n, err := c.Read(b[:]); n > 0 || (err != nil && !isTimeout(err)) {
				cut = time.Since(start)
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatal("a client sending one byte a second was not cut off within 30 s")
			}
		}
		if cut == 0 || cut < 9*time.Second {
			t.Fatalf("cut after %s", cut)
		}
		t.Logf("slow client cut off after %s", cut.Round(time.Millisecond))
		s.do(t, "GET", "/v1/attempts/slow", "demo-agent", "").want(t, 404, "NOT_FOUND")
	})
	after := s.do(t, "GET", "/v1/businesses", "demo-agent", "").want(t, 200, "")
	if !bytes.Equal(stripMeta(before.raw), stripMeta(after.raw)) {
		t.Errorf("business list changed:\nbefore %s\nafter  %s", before.raw, after.raw)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
