package server_test

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
)

// BenchmarkServerReplay measures what the harness's replay phases send, in
// process (httptest, no network), on SQLite: business.create replays
// cycling over 2,000 completed keys, each replayed many times (as the
// harness's clients cycle over their keys), through server.New's handler
// with the metrics and the JSON log line. hit answers from the replay
// cache; miss from the store, the keys evicted from a cache of 1 MiB
// (what a replay costs when its key left the cache); off with the cache
// off (as a replay of a key another instance ran, which this one never
// knew).
// The -16 variants replay from 16 goroutines. Use TMPDIR=/dev/shm;
// cpu-µs/op is the process's CPU per replay, as in BenchmarkServerCall.
func BenchmarkServerReplay(b *testing.B) {
	for _, tc := range []struct {
		name     string
		cache    int
		parallel bool
	}{{"hit", 0, false}, {"miss", 1 << 20, false}, {"off", -1, false}, {"hit-16", 0, true}, {"miss-16", 1 << 20, true}} {
		b.Run(tc.name, func(b *testing.B) {
			send := replayServer(b, tc.cache)
			const keys = 2000
			run := strings.ToLower(rand.Text()[:8])
			body := func(i int) string { return fmt.Sprintf(`{"slug":"r-%s-%d","name":"Bench"}`, run, i) }
			for i := range keys {
				if c := send(fmt.Sprintf("k-%s-%d", run, i), body(i)); c != http.StatusCreated {
					b.Fatalf("first: %d", c)
				}
			}
			b.ReportAllocs()
			cpu := cpuTime()
			if tc.parallel {
				// 16 callers, as the harness's clients: the audit queue
				// batches their replays' events as it does under load.
				var n atomic.Int64
				b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := int(n.Add(1)) % keys
						if c := send(fmt.Sprintf("k-%s-%d", run, i), body(i)); c != http.StatusCreated {
							b.Errorf("replay: %d", c)
							return
						}
					}
				})
			} else {
				i := 0
				for b.Loop() {
					i = (i + 1) % keys
					if c := send(fmt.Sprintf("k-%s-%d", run, i), body(i)); c != http.StatusCreated {
						b.Fatalf("replay: %d", c)
					}
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// replayServer serves the demo on a new SQLite store with the replay cache
// bounded to cacheBytes (pipeline.Config.ReplayCacheBytes), and returns a
// sender of business.create calls.
func replayServer(b *testing.B, cacheBytes int) func(key, body string) int {
	dir := b.TempDir()
	store, err := sqlitestore.Open(b.Context(), filepath.Join(dir, "idem.db"), idem.StoreConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		b.Fatal(err)
	}
	app, err := demo.Open(b.Context(), "sqlite:"+filepath.Join(dir, "idem.db"), demo.Config{Sealer: box, Writer: store.Write})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { app.Close() })
	srv, err := server.New(b.Context(), server.Config{
		Operations: app.Operations(), Store: store, Auth: httpapi.NewTokens(demo.Tokens()), Routes: app.Routes(),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Runner: pipeline.Config{Sealer: box, ReplayCacheBytes: cacheBytes},
	})
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	return func(key, body string) int {
		req := httptest.NewRequest("POST", "/v1/businesses", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer demo-agent")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
}
