package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveUntilListening runs idem serve with args until it listens, then
// stops it and returns its stderr.
func serveUntilListening(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	var stderr syncBuffer
	m := Main{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &stderr, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		code <- m.Run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--store", "sqlite:" + filepath.Join(dir, "idem.db"),
			"--secret-key-file", filepath.Join(dir, "idem.key")}, args...))
	}()
	for i := 0; !strings.Contains(stderr.String(), "listening on "); i++ {
		select {
		case c := <-code:
			cancel()
			t.Fatalf("idem serve exited %d before listening: %s", c, stderr.String())
		default:
		}
		if i > 6000 {
			cancel()
			t.Fatalf("idem serve did not listen: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("idem serve exited %d: %s", c, stderr.String())
	}
	return stderr.String()
}

// TestServeWarnsWhenNoCallerCanAuthenticate: without --demo and without
// tokens, idem serve says at start-up that every caller will get 401, and
// how to fix it; with a tokens file it does not.
func TestServeWarnsWhenNoCallerCanAuthenticate(t *testing.T) {
	out := serveUntilListening(t)
	if !strings.Contains(out, "no caller can authenticate") || !strings.Contains(out, "--tokens-file") {
		t.Fatalf("no warning without tokens:\n%s", out)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	line := fmt.Sprintf("sha256:%x acme agent-1 agent\n", sha256.Sum256([]byte("secret-token")))
	if err := os.WriteFile(tokens, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := serveUntilListening(t, "--tokens-file", tokens); strings.Contains(out, "no caller can authenticate") {
		t.Fatalf("warning with a tokens file:\n%s", out)
	}
}

// A key file that cannot be created is refused before the store file is
// created and migrated: a refused start-up leaves nothing behind.
func TestServeChecksKeyFileBeforeStore(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "idem.db")
	code, _, stderr := run(t, nil, "serve", "--addr", "127.0.0.1:0", "--store", "sqlite:"+db,
		"--secret-key-file", filepath.Join(dir, "no-such-dir", "idem.key"))
	if code == 0 || !strings.Contains(stderr, "--secret-key-file") || !strings.Contains(stderr, filepath.Join(dir, "no-such-dir", "idem.key")) {
		t.Fatalf("idem serve with an uncreatable key file = exit %d, stderr %q; want a refusal naming the key file", code, stderr)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Fatalf("refused start-up left %v in %s", names, dir)
	}
}

// Plain idem serve says it serves no operations and where they come from;
// --demo does not.
func TestServeSaysWhereOperationsComeFrom(t *testing.T) {
	out := serveUntilListening(t)
	for _, want := range []string{"serving no operations", "--demo", "docs/embedding.md", "idem proxy", "idem gateway"} {
		if !strings.Contains(out, want) {
			t.Errorf("idem serve's start-up lacks %q:\n%s", want, out)
		}
	}
	if out := serveUntilListening(t, "--demo"); strings.Contains(out, "serving no operations") {
		t.Errorf("idem serve --demo says it serves no operations:\n%s", out)
	}
}

// An address another process listens on is refused before anything is
// created, naming the address and what to do.
func TestServeAddressInUseLeavesNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	dir := t.TempDir()
	code, _, stderr := run(t, nil, "serve", "--demo", "--addr", addr, "--store", "sqlite:"+filepath.Join(dir, "idem.db"),
		"--secret-key-file", filepath.Join(dir, "idem.key"))
	if code == 0 {
		t.Fatalf("idem serve on a busy address exited 0")
	}
	for _, want := range []string{addr, "already in use", "--addr", "IDEM_ADDR"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("idem serve on a busy address: stderr lacks %q:\n%s", want, stderr)
		}
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Errorf("refused start-up left %v in %s", names, dir)
	}
}
