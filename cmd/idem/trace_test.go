//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestTraceWrittenOnSignalAndAtEnd: IDEM_TRACE writes the flight
// recorder's window on SIGUSR1 and again when the run ends, each a Go
// execution trace.
func TestTraceWrittenOnSignalAndAtEnd(t *testing.T) {
	dir := t.TempDir()
	end := startTrace(filepath.Join(dir, "t-%p-%n.out"))
	first := filepath.Join(dir, "t-"+strconv.Itoa(os.Getpid())+"-1.out")
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(first); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no trace written on SIGUSR1")
		}
	}
	end()
	for _, n := range []string{"1", "2"} {
		b, err := os.ReadFile(filepath.Join(dir, "t-"+strconv.Itoa(os.Getpid())+"-"+n+".out"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("go 1.")) {
			t.Errorf("trace %s starts %q, want a Go execution trace", n, b[:min(len(b), 16)])
		}
	}
}
