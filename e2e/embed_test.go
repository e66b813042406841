package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// otlpReceiver records the bodies of OTLP/HTTP trace exports.
type otlpReceiver struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(body)
	o.mu.Lock()
	o.bodies = append(o.bodies, b)
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// saw reports whether any export carried these bytes (a trace id: OTLP's
// protobuf holds it raw).
func (o *otlpReceiver) saw(b []byte) (exports int, found bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, body := range o.bodies {
		found = found || bytes.Contains(body, b)
	}
	return len(o.bodies), found
}

// TestEmbeddedService builds examples/embed — a service of its own module
// that imports idem through a replace directive only — and runs it as a
// user would: its own route beside idem's mounted under /idem/, callers
// authenticated by JWTs from a JWKS served here, traces exported to an
// OTLP endpoint served here, and a clean stop on SIGTERM.
func TestEmbeddedService(t *testing.T) {
	dir := t.TempDir()
	program := filepath.Join(dir, "embed")
	build := exec.Command("go", "build", "-o", program, ".")
	build.Dir = filepath.Join("..", "examples", "embed")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/embed: %v\n%s", err, out)
	}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	}))
	defer jwks.Close()
	otlp := &otlpReceiver{}
	collector := httptest.NewServer(otlp)
	defer collector.Close()

	const issuer, audience = "https://login.example.test/", "notes"
	sign := func(expiry time.Time) string {
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(signer).
			Claims(jwt.Claims{Issuer: issuer, Audience: jwt.Audience{audience}, Subject: "agent-7", Expiry: jwt.NewNumericDate(expiry), IssuedAt: jwt.NewNumericDate(expiry.Add(-time.Hour))}).
			Claims(map[string]any{"org": "acme", "kind": "agent"}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	cmd := exec.Command(program, "--addr", "127.0.0.1:0", "--store", filepath.Join(dir, "embed.db"),
		"--jwks-url", jwks.URL, "--jwt-issuer", issuer, "--jwt-audience", audience)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_SERVICE_NAME=notes")
	svc := launch(t, cmd, "examples/embed")

	if r := svc.do(t, "GET", "/hello", "", ""); r.status != 200 || !strings.Contains(string(r.raw), "hello from the notes service") {
		t.Fatalf("the service's own route: %d %s", r.status, r.raw)
	}
	token := sign(time.Now().Add(time.Hour))
	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"
	traceparent := "00-" + traceID + "-00f067aa0ba902b7-01"
	first := svc.do(t, "POST", "/idem/v1/notes", token, `{"text":"buy flour"}`, "Idempotency-Key", "note-flour-1", "traceparent", traceparent).want(t, 201, "")
	if first.get("data.by") != "agent-7" {
		t.Fatalf("the note's author is %v, want the JWT's subject agent-7: %s", first.get("data.by"), first.raw)
	}
	again := svc.do(t, "POST", "/idem/v1/notes", token, `{"text":"buy flour"}`, "Idempotency-Key", "note-flour-1").want(t, 201, "")
	if again.header.Get("Idempotent-Replayed") != "true" || again.get("data.id") != first.get("data.id") {
		t.Fatalf("the same-key retry was not a replay of the first note: %s (first %s)", again.raw, first.raw)
	}
	svc.do(t, "POST", "/idem/v1/notes", sign(time.Now().Add(-time.Hour)), `{"text":"late"}`, "Idempotency-Key", "note-late-1").want(t, 401, "UNAUTHENTICATED")
	svc.do(t, "POST", "/idem/v1/notes", "", `{"text":"anonymous"}`, "Idempotency-Key", "note-anon-1").want(t, 401, "UNAUTHENTICATED")
	var doc struct {
		Servers []struct{ URL string } `json:"servers"`
	}
	if r := svc.do(t, "GET", "/idem/openapi.json", "", ""); json.Unmarshal(r.raw, &doc) != nil || len(doc.Servers) == 0 || doc.Servers[0].URL != "/idem" {
		t.Fatalf("the OpenAPI document does not say where it is mounted: %.300s", r.raw)
	}

	if err := svc.stop(t); err != nil {
		t.Fatalf("the service did not exit cleanly on SIGTERM: %v\n%s", err, svc.logs())
	}
	if !strings.Contains(svc.logs(), "stopped cleanly") {
		t.Fatalf("no clean stop in the log:\n%s", svc.logs())
	}
	id, _ := hex.DecodeString(traceID)
	if n, found := otlp.saw(id); !found {
		t.Fatalf("%d OTLP exports reached the collector; none carried the caller's trace %s", n, traceID)
	}
}

// idem serve exports its spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT
// is set, continuing the caller's trace, and flushes them at SIGTERM.
func TestServeExportsTraces(t *testing.T) {
	otlp := &otlpReceiver{}
	collector := httptest.NewServer(otlp)
	defer collector.Close()
	dir := t.TempDir()
	cmd := exec.Command(binary, "serve", "--demo", "--addr", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(dir, "idem.db"),
		"--secret-key-file", filepath.Join(dir, "idem.key"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=", "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL)
	s := launch(t, cmd, "idem serve")
	traceID := "0af7651916cd43dd8448eb211c80319c"
	s.do(t, "GET", "/v1/businesses", "demo-agent", "", "traceparent", "00-"+traceID+"-b7ad6b7169203331-01").want(t, 200, "")
	if err := s.stop(t); err != nil {
		t.Fatalf("idem serve did not stop cleanly: %v", err)
	}
	if !strings.Contains(s.logs(), "tracing on") {
		t.Fatalf("idem serve did not say tracing is on:\n%s", s.logs())
	}
	id, _ := hex.DecodeString(traceID)
	if n, found := otlp.saw(id); !found {
		t.Fatalf("%d OTLP exports reached the collector; none carried the caller's trace %s", n, traceID)
	}
}
