package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem/webhooksig"
)

// lockedBuffer is a bytes.Buffer safe for the listener's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startListener runs idem webhook listen on a free port through Main.Run
// and returns its base URL, its stdout, and a stop function that cancels
// it and returns its exit code.
func startListener(t *testing.T, args ...string) (base string, stdout *lockedBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout = &lockedBuffer{}
	errR, errW := io.Pipe()
	m := Main{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: errW, Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() {
		code := m.Run(ctx, append([]string{"webhook", "listen", "--addr", "127.0.0.1:0"}, args...))
		errW.Close()
		done <- code
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				ready <- addr
			}
		}
		close(ready)
	}()
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			code = <-done
		})
		return code
	}
	t.Cleanup(func() { stop() })
	select {
	case base = <-ready:
		if base == "" {
			t.Fatalf("listener exited before listening: exit %d", stop())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("listener did not start")
	}
	return base, stdout, stop
}

func TestWebhookListen(t *testing.T) {
	const secret = "whsec_test_MfKQ9r8GKYqrTwjUPD8ILPZIo2La"
	base, stdout, stop := startListener(t, "--secret", secret)

	post := func(body []byte, header http.Header) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/hooks", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	body := []byte(`{"id":"dlv_1","type":"payment.failed","createdAt":"2025-01-01T00:00:00Z","data":{"test":true}}`)
	signed := http.Header{
		"Content-Type":     {"application/json"},
		"Idem-Signature":   {webhooksig.Sign(secret, time.Now(), body)},
		"Idem-Delivery-Id": {"dlv_1"},
		"Idem-Event-Type":  {"payment.failed"},
	}
	if got := post(body, signed); got != http.StatusOK {
		t.Fatalf("signed delivery answered %d, want 200", got)
	}
	wrongSecret := signed.Clone()
	wrongSecret.Set("Idem-Signature", webhooksig.Sign("whsec_other", time.Now(), body))
	if got := post(body, wrongSecret); got != http.StatusBadRequest {
		t.Fatalf("delivery signed with another secret answered %d, want 400", got)
	}
	tampered := bytes.Replace(body, []byte("payment.failed"), []byte("payment.succeeded"), 1)
	if got := post(tampered, signed); got != http.StatusBadRequest {
		t.Fatalf("tampered delivery answered %d, want 400", got)
	}
	old := signed.Clone()
	old.Set("Idem-Signature", webhooksig.Sign(secret, time.Now().Add(-6*time.Minute), body))
	if got := post(body, old); got != http.StatusBadRequest {
		t.Fatalf("delivery signed 6 minutes ago answered %d, want 400", got)
	}
	if got := post(body, http.Header{}); got != http.StatusBadRequest {
		t.Fatalf("unsigned delivery answered %d, want 400", got)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("listener exited %d after cancel, want 0", code)
	}

	type line struct {
		ID         string          `json:"id"`
		Type       string          `json:"type"`
		Verified   bool            `json:"verified"`
		ReceivedAt time.Time       `json:"receivedAt"`
		Body       json.RawMessage `json:"body"`
		Error      string          `json:"error"`
	}
	var lines []line
	for _, s := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("stdout line %q: %v", s, err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 5 {
		t.Fatalf("stdout has %d lines, want 5:\n%s", len(lines), stdout.String())
	}
	if l := lines[0]; !l.Verified || l.ID != "dlv_1" || l.Type != "payment.failed" || l.ReceivedAt.IsZero() || l.Error != "" || !bytes.Equal(l.Body, body) {
		t.Errorf("verified line %+v", l)
	}
	for i, want := range []string{"does not match", "does not match", "outside the tolerance", "no signature"} {
		if l := lines[i+1]; l.Verified || !strings.Contains(l.Error, want) || l.ID != "dlv_1" {
			t.Errorf("line %d = %+v, want unverified with %q", i+2, l, want)
		}
	}
	if strings.Contains(stdout.String(), secret) {
		t.Error("stdout shows the secret")
	}
}

func TestWebhookListenNeedsASecret(t *testing.T) {
	code, _, stderr := run(t, nil, "webhook", "listen", "--addr", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(stderr, "--secret") {
		t.Fatalf("exit %d, stderr %q; want a usage error naming --secret", code, stderr)
	}
}

func TestWebhookListenSecretFromEnvironment(t *testing.T) {
	// An address that cannot be listened on ends the command at once, after
	// the secret was accepted.
	code, _, stderr := run(t, map[string]string{"IDEM_WEBHOOK_SECRET": "whsec_x"}, "webhook", "listen", "--addr", "256.0.0.1:1")
	if code != exitError || !strings.Contains(stderr, "listen on 256.0.0.1:1") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the address", code, stderr)
	}
}
