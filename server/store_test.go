package server_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/server"
)

// OpenStore logs what it connects to (host, port, database, user, never
// the password) before it connects, so that a wait is never silent, and a
// server that never answers fails within the connect timeout.
func TestOpenStoreLogsWhatItConnectsTo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	_, err = server.OpenStore(t.Context(), fmt.Sprintf("postgres://app:s3cret@127.0.0.1:%d/orders?sslmode=disable", port),
		idem.StoreConfig{ConnectTimeout: 100 * time.Millisecond}, log)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Fatalf("OpenStore of a silent server: %v; want an error naming 127.0.0.1:%d", err, port)
	}
	line := buf.String()
	for _, want := range []string{`"msg":"store: connecting to PostgreSQL"`, `"host":"127.0.0.1"`, fmt.Sprintf(`"port":%d`, port), `"database":"orders"`, `"user":"app"`, `"connectTimeout":"100ms"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %s", line, want)
		}
	}
	if strings.Contains(line, "s3cret") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the password leaked: log %q, error %v", line, err)
	}
}

// Opening a SQLite store logs the file's absolute path and the migrations
// applied, then, opened again, that the schema is up to date.
func TestOpenStoreLogsMigrations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	for _, want := range []string{`"msg":"store: applied migrations","migrations":["001_init",`, `"msg":"store: schema up to date"`} {
		var buf bytes.Buffer
		s, err := server.OpenStore(t.Context(), "sqlite:"+path, idem.StoreConfig{}, slog.New(slog.NewJSONHandler(&buf, nil)))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if !strings.Contains(buf.String(), `"path":"`+path+`"`) || !strings.Contains(buf.String(), want) {
			t.Errorf("log %q lacks the path or %s", buf.String(), want)
		}
	}
}
