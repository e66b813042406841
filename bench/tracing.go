package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
)

// traceSink is the OTLP/HTTP collector of --tracing: it takes the servers'
// exports at /v1/traces and counts them, so that a run measures idem with
// tracing on (every span recorded and exported over loopback) and can tell
// that the servers did export.
type traceSink struct {
	srv      *http.Server
	requests atomic.Int64
	bytes    atomic.Int64
}

// startTraceSink starts the sink and sets the OTEL_* environment every
// idem serve and idem proxy started after it inherits.
func startTraceSink() (*traceSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("--tracing: %w", err)
	}
	s := &traceSink{}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go func() { _ = s.srv.Serve(ln) }()
	for k, v := range map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(), "OTEL_TRACES_SAMPLER": "always_on",
	} {
		os.Setenv(k, v)
	}
	return s, nil
}

// summary says what the servers exported; an error when nothing.
func (s *traceSink) summary() (string, error) {
	_ = s.srv.Close()
	n, b := s.requests.Load(), s.bytes.Load()
	if n == 0 {
		return "", fmt.Errorf("--tracing: the servers exported no traces; this idem binary does not read the OTEL_* environment")
	}
	return fmt.Sprintf("on (--tracing): every span recorded and exported over OTLP/HTTP to a sink in the harness, %d exports, %.1f MiB", n, float64(b)/(1<<20)), nil
}
