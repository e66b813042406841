package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// server is one running `idem serve --demo` process.
type server struct {
	url  string
	cmd  *exec.Cmd
	done chan error
	mu   sync.Mutex
	tail []string // the last lines of its stderr, for errors
}

// startServer starts `idem serve --demo` on store with its key file in dir
// and waits for `listening on http://ADDR` on stderr. The rest of stderr
// (one JSON line per execution) is read and dropped, keeping a short tail.
func startServer(ctx context.Context, binary, store, dir string, extra []string) (*server, error) {
	args := append([]string{"serve", "--demo", "--addr", "127.0.0.1:0", "--store", store,
		"--secret-key-file", filepath.Join(dir, "idem.key")}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=")
	return startProcess(ctx, cmd, "idem "+args[0])
}

// startProcess starts cmd and waits for `listening on http://ADDR` on its
// stderr; what names it in errors.
func startProcess(ctx context.Context, cmd *exec.Cmd, what string) (*server, error) {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if addr, ok := strings.CutPrefix(line, "listening on "); ok {
				ready <- addr
				continue
			}
			s.mu.Lock()
			s.tail = append(s.tail, line)
			if len(s.tail) > 20 {
				s.tail = s.tail[1:]
			}
			s.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
		s.done <- cmd.Wait()
	}()
	select {
	case s.url = <-ready:
		return s, nil
	case err := <-s.done:
		return nil, fmt.Errorf("%s exited before listening (%v):\n%s", what, err, s.logs())
	case <-time.After(60 * time.Second):
		s.kill()
		return nil, fmt.Errorf("%s did not listen within 60 s:\n%s", what, s.logs())
	case <-ctx.Done():
		s.kill()
		return nil, ctx.Err()
	}
}

func (s *server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.tail, "\n")
}

// stop asks the server to shut down (SIGTERM) and waits, killing it after 30 s.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.kill()
	}
}

func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// procStat is a process's CPU time so far and resident set size.
type procStat struct {
	cpu time.Duration
	rss int64 // bytes
}

// clockTick is USER_HZ: /proc/PID/stat counts CPU time in ticks of 1/100 s
// on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// readProc reads utime+stime from /proc/PID/stat and VmRSS from
// /proc/PID/status. Zero values where /proc is not available.
func readProc(pid int) procStat {
	var ps procStat
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name, which is in parentheses and may hold spaces.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			// f[0] is field 3 (state); utime is field 14, stime field 15.
			if len(f) > 12 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				ps.cpu = time.Duration(u+st) * clockTick
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				ps.rss = kb << 10
			}
		}
	}
	return ps
}

// procTotal sums readProc over servers.
func procTotal(servers []*server) procStat {
	var t procStat
	for _, s := range servers {
		ps := readProc(s.cmd.Process.Pid)
		t.cpu += ps.cpu
		t.rss += ps.rss
	}
	return t
}
