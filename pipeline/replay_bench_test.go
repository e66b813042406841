package pipeline_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pipeline"
)

// BenchmarkReplay measures a replay of a transactional operation through
// the runner on each store, from 16 callers cycling over 1,200 completed
// keys: hit from the replay cache; miss from the store, the keys evicted
// from a cache of 512 KiB (remembered as ghosts: a read); off with the
// cache off (the reservation finds the record, as for a key this instance
// never knew). cpu-µs/op is this process's CPU per replay (on PostgreSQL
// the database's is not in it). Without IDEM_TEST_DATABASE_URL it starts
// a throwaway PostgreSQL cluster (internal/pgtest) for the pg cases.
func BenchmarkReplay(b *testing.B) {
	if os.Getenv(pgtest.EnvURL) == "" {
		b.Setenv(pgtest.EnvURL, pgtest.StartCluster(b).URL())
	}
	for _, store := range []string{"sqlite", "pg"} {
		for _, tc := range []struct {
			name  string
			cache int
		}{{"hit", 0}, {"miss", 512 << 10}, {"off", -1}} {
			b.Run(store+"/"+tc.name, func(b *testing.B) {
				s, _ := benchStore(b, store)
				reg, err := idem.NewRegistry(txCreateOp(nil, nil), showOp())
				if err != nil {
					b.Fatal(err)
				}
				r, err := pipeline.New(reg, pipeline.Config{Store: s, ReplayCacheBytes: tc.cache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = r.Flush(b.Context()) })
				const keys = 1200
				call := func(i int) idem.Result {
					return r.Call(b.Context(), idem.Invocation{Operation: "thing.create", Principal: agent, Key: fmt.Sprint("k", i),
						Intent: idem.Intent{Body: fmt.Appendf(nil, `{"name":"n%d"}`, i)}})
				}
				for i := range keys {
					if res := call(i); res.Status != 201 {
						b.Fatalf("first: %d %s", res.Status, res.Body())
					}
				}
				var n atomic.Int64
				b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if res := call(int(n.Add(1)) % keys); !res.Replayed {
							b.Errorf("status %d not replayed: %s", res.Status, res.Body())
							return
						}
					}
				})
				b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
				hits, misses := r.ReplayCacheStats()
				if hits+misses > 0 {
					b.ReportMetric(float64(hits)/float64(hits+misses), "hit-ratio")
				}
			})
		}
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
