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
	"regexp"
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

// TestUseTheUnpublishedModule runs the steps README.md ("As a library")
// and docs/embedding.md ("Getting it") give for using the module before
// it is published, as the pages show them: in a new module (go mod init)
// holding examples/embed's program, the page's ```sh block line by line,
// its `git clone` made a link to this repository (so that the working tree
// is what is tested), then go build with go.mod as the steps left it
// (-mod=readonly). Modules come from the module cache (GOPROXY=off);
// where it lacks one, the run is repeated through the default proxy,
// saying so. A wrong replace path, or a missing go mod tidy, fails here.
func TestUseTheUnpublishedModule(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range []struct{ path, heading string }{
		{"README.md", "## As a library"},
		{"docs/embedding.md", "## Getting it"},
	} {
		t.Run(strings.ReplaceAll(page.path, "/", "_"), func(t *testing.T) {
			block := sectionBlock(t, filepath.Join(root, page.path), page.heading, "sh")
			out, err := cloneAndReplace(t, root, block, "off")
			if err != nil && strings.Contains(out, "GOPROXY=off") {
				t.Logf("the module cache lacks a module the steps need; again through the default proxy:\n%s", out)
				out, err = cloneAndReplace(t, root, block, "")
			}
			if err != nil {
				t.Fatalf("%s, %q: %v\n%s", page.path, page.heading, err, out)
			}
		})
	}
}

// cloneAndReplace runs block's commands in a new module beside a link to
// the repository at root, then builds it; it returns the output of the
// command that failed. proxy "off" takes modules from the module cache
// only; "" leaves GOPROXY as it is.
func cloneAndReplace(t *testing.T, root string, block []string, proxy string) (string, error) {
	dir := t.TempDir()
	svc := filepath.Join(dir, "svc")
	if err := os.Mkdir(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"main.go", "tracing.go"} {
		b, err := os.ReadFile(filepath.Join(root, "examples", "embed", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(svc, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// -mod=readonly: the build takes go.mod as the steps left it;
	// -buildvcs=false: the temporary directory may sit in a repository.
	env := append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off")
	if proxy == "off" {
		// The cache's modules were checked against go.sum and the checksum
		// database when they were downloaded; offline, it is not reachable.
		env = append(env, "GOPROXY=off", "GOSUMDB=off")
	}
	run := func(line string) (string, error) {
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir, cmd.Env = svc, env
		out, err := cmd.CombinedOutput()
		return "$ " + line + "\n" + string(out), err
	}
	if out, err := run("go mod init example.com/svc"); err != nil {
		return out, err
	}
	clone := regexp.MustCompile(`^git clone https://github\.com/idem-run/idem (\S+)`)
	cloned := false
	for _, line := range block {
		if m := clone.FindStringSubmatch(line); m != nil {
			// The clone, made a link to this working tree.
			if err := os.Symlink(root, filepath.Join(svc, m[1])); err != nil {
				return line, err
			}
			cloned = true
			continue
		}
		if out, err := run(line); err != nil {
			return out, err
		}
	}
	if !cloned {
		t.Fatalf("the block has no `git clone https://github.com/idem-run/idem DIR` line:\n%s", strings.Join(block, "\n"))
	}
	return run("go build -o svc .")
}

// sectionBlock returns the non-blank lines of the first ```lang block
// under heading (a whole line) of the Markdown file at path.
func sectionBlock(t *testing.T, path, heading, lang string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("%s: no ```%s block under %q", path, lang, heading)
	}
	block, _, _ = strings.Cut(block, "\n```")
	var lines []string
	for l := range strings.Lines(block) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
