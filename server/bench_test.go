package server_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	nooptrace "go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
)

// BenchmarkServerCall measures what the harness's keyed phases send,
// in process (httptest, no network): POST /v1/businesses (business.create,
// transactional) through server.New's handler on SQLite, with the demo
// tokens, the metrics and idem serve's JSON log line (to io.Discard). first
// sends a fresh key and slug each time, replay one completed key;
// first-2p refunds a cent (order.refund, two-phase) with a fresh key. Use
// TMPDIR=/dev/shm, so that fsync is not what it measures, and -cpuprofile.
// cpu-µs/op is the process's CPU time (user and system, every goroutine:
// SQLite's engine, the garbage collector) per call, as the harness reads
// the server's from /proc.
func BenchmarkServerCall(b *testing.B) { benchServerCall(b, nil) }

// BenchmarkServerCallPG is BenchmarkServerCall on PostgreSQL: on the server
// IDEM_TEST_DATABASE_URL names, else on a private cluster started for it
// (pgtest.StartCluster: fsync off, so it measures CPU, not the disk). The
// database's CPU is not in cpu-µs/op: it is another process.
func BenchmarkServerCallPG(b *testing.B) {
	admin := os.Getenv(pgtest.EnvURL)
	if admin == "" {
		admin = pgtest.StartCluster(b).URL()
		b.Setenv(pgtest.EnvURL, admin)
	}
	benchServerCallOn(b, nil, pgtest.NewDatabase(b))
}

// BenchmarkServerCallTracing is BenchmarkServerCall traced: noop with the
// no-op provider (the runner's spans, not recording; no otelhttp),
// dropped with the SDK's sampling nothing (otelhttp's server span and the
// runner's, not recording), sdk with the SDK's, every span recorded and
// none exported.
func BenchmarkServerCallTracing(b *testing.B) {
	b.Run("noop", func(b *testing.B) { benchServerCall(b, nooptrace.NewTracerProvider()) })
	b.Run("dropped", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
		defer tp.Shutdown(context.Background())
		benchServerCall(b, tp)
	})
	b.Run("sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		defer tp.Shutdown(context.Background())
		benchServerCall(b, tp)
	})
}

func benchServerCall(b *testing.B, tp trace.TracerProvider) { benchServerCallOn(b, tp, "") }

// benchServerCallOn runs the calls on the PostgreSQL database pgURL, or on
// SQLite when it is "".
func benchServerCallOn(b *testing.B, tp trace.TracerProvider, pgURL string) {
	sendTo, dir := demoServer(b, tp, pgURL)
	send := func(key, body string) int { return sendTo("/v1/businesses", key, body) }
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		// Per run: with -count, a run's keys would be the last's, replays.
		run := rand.Text()[:8]
		i := 0
		cpu := cpuTime()
		for b.Loop() {
			i++
			slug := fmt.Sprintf("b-%s-%d", strings.ToLower(run), i)
			if c := send("k-"+slug, `{"slug":"`+slug+`","name":"Bench"}`); c != http.StatusCreated {
				b.Fatalf("first: %d", c)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	b.Run("first-2p", func(b *testing.B) {
		// The harness's first-2p: order.refund, two-phase, one cent of an
		// order of its own per call (bench/orders.go), prepared here.
		if pgURL != "" {
			b.Skip("the orders are prepared on SQLite only")
		}
		const orders = 100000
		db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "idem.db")+"?_pragma=busy_timeout(5000)")
		if err != nil {
			b.Fatal(err)
		}
		_, err = db.Exec(`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
			INSERT OR IGNORE INTO idem_demo_orders (org, id, amount, created_at) SELECT 'acme', 'ord_bench_' || i, 10000, 0 FROM s`, orders)
		db.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		run := rand.Text()[:8]
		i := 0
		cpu := cpuTime()
		for b.Loop() {
			i++
			if c := sendTo(fmt.Sprintf("/v1/orders/ord_bench_%d/refund", 1+i%orders), fmt.Sprintf("r-%s-%d", run, i), `{"amount":1}`); c != http.StatusOK {
				b.Fatalf("first-2p: %d", c)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		if c := send("k-replay", `{"slug":"replay","name":"Bench"}`); c != http.StatusCreated {
			b.Fatalf("first: %d", c)
		}
		cpu := cpuTime()
		for b.Loop() {
			if c := send("k-replay", `{"slug":"replay","name":"Bench"}`); c != http.StatusCreated {
				b.Fatalf("replay: %d", c)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
}

// demoServer serves idem serve --demo's handler in process on the
// PostgreSQL database pgURL, or on SQLite in a temporary directory (dir)
// when it is "", and returns a function that sends a keyed POST to it, as
// the demo agent, and returns the status.
func demoServer(t testing.TB, tp trace.TracerProvider, pgURL string) (sendTo func(path, key, body string) int, dir string) {
	dir = t.TempDir()
	storeURL := "sqlite:" + filepath.Join(dir, "idem.db")
	if pgURL != "" {
		storeURL = pgURL
	}
	store, err := server.OpenStore(t.Context(), storeURL, idem.StoreConfig{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demo.Config{Sealer: box}
	if s, ok := store.(*sqlitestore.Store); ok {
		cfg.Writer = s.Write
	}
	app, err := demo.Open(t.Context(), storeURL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	tokens := httpapi.NewTokens(demo.Tokens())
	srv, err := server.New(t.Context(), server.Config{
		Operations: app.Operations(), Store: store, Auth: tokens, Routes: app.Routes(),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Runner: pipeline.Config{Sealer: box, TracerProvider: tp},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	return func(path, key, body string) int {
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer demo-agent")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}, dir
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
