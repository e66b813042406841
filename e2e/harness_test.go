// Package e2e drives the built idem binary as a user would: it starts
// `idem serve --demo` as a separate process and talks to it over real HTTP.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the idem binary built once for the package, or the one
// IDEM_E2E_BINARY names (to run these tests against another build).
var binary string

func TestMain(m *testing.M) {
	if binary = os.Getenv("IDEM_E2E_BINARY"); binary != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "idem-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "idem")
	build := exec.Command("go", "build", "-o", binary, "github.com/idem-run/idem/cmd/idem")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build idem:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one running `idem serve` process.
type server struct {
	t    *testing.T
	url  string
	cmd  *exec.Cmd
	done chan error
	mu   sync.Mutex
	log  bytes.Buffer
}

// serve starts `idem serve --demo` on store with the key file in dir and
// waits until it says it listens.
func serve(t *testing.T, store, dir string, args ...string) *server {
	t.Helper()
	return start(t, dir, append([]string{"serve", "--demo", "--addr", "127.0.0.1:0", "--store", store, "--secret-key-file", filepath.Join(dir, "idem.key")}, args...)...)
}

// start runs the binary with args (a command that serves: serve, proxy)
// in dir and waits until it says it listens.
func start(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=")
	return launch(t, cmd, "idem "+args[0])
}

// launch starts cmd, a program that says "listening on URL" on stderr
// once it serves, and waits for that line.
func launch(t *testing.T, cmd *exec.Cmd, name string) *server {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			if addr, ok := strings.CutPrefix(line, "listening on "); ok {
				ready <- addr
			}
		}
		s.done <- cmd.Wait()
	}()
	select {
	case s.url = <-ready:
	case err := <-s.done:
		t.Fatalf("%s exited before listening (%v):\n%s", name, err, s.logs())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("%s did not listen within 30 s:\n%s", name, s.logs())
	}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("server %s log:\n%s", s.url, s.logs())
		}
	})
	return s
}

func (s *server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop sends SIGTERM and returns the exit error.
func (s *server) stop(t *testing.T) error {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		return err
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		t.Fatal("idem serve did not stop within 60 s of SIGTERM")
		return nil
	}
}

// kill sends SIGKILL and waits for the process to end.
func (s *server) kill(t *testing.T) {
	t.Helper()
	s.cmd.Process.Kill()
	<-s.done
}

// reply is one HTTP answer.
type reply struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// do sends one request; headers alternate name, value.
func (s *server) do(t *testing.T, method, path, token, body string, headers ...string) reply {
	t.Helper()
	r, err := s.try(method, path, token, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// try is do without failing the test on a transport error.
func (s *server) try(method, path, token, body string, headers ...string) (reply, error) {
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header}
	if r.raw, err = io.ReadAll(resp.Body); err != nil {
		return reply{}, err
	}
	if strings.Contains(resp.Header.Get("Content-Type"), "json") && json.Unmarshal(r.raw, &r.body) != nil {
		return reply{}, fmt.Errorf("body %q is not a JSON object", r.raw)
	}
	return r, nil
}

// want fails unless the reply has status and code ("" for success).
func (r reply) want(t *testing.T, status int, code string) reply {
	t.Helper()
	got, _ := r.body["code"].(string)
	if r.status != status || got != code {
		t.Fatalf("got %d %s, want %d %s: %s", r.status, got, status, code, r.raw)
	}
	return r
}

// get reads a value at a dotted path of the body ("meta.idempotency.replayed").
func (r reply) get(path string) any {
	var v any = r.body
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	return v
}
