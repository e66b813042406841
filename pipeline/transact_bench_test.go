package pipeline_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/internal/sqlitetest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

// BenchmarkFirstExecution compares, in process and in parallel, a first
// keyed execution of a two-phase operation whose handler writes one row in
// a transaction of its own (reserve, the handler's write, complete: three
// commits) with a transactional one whose handler writes the same row
// through the store's transaction (one commit).
func BenchmarkFirstExecution(b *testing.B) {
	for _, store := range []string{"sqlite", "pg"} {
		for _, shape := range []string{"two-phase", "transactional"} {
			b.Run(store+"/"+shape, func(b *testing.B) {
				s, url := benchStore(b, store)
				op := ownWriteOp(b, s, url)
				if shape == "transactional" {
					op = txCreateOp(nil, nil)
				}
				r := newBenchRunner(b, s, op, showOp())
				var n atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						resp := r.Call(b.Context(), idem.Invocation{
							Operation: "thing.create",
							Principal: agent,
							Key:       fmt.Sprint("k", i),
							Intent:    idem.Intent{Body: fmt.Appendf(nil, `{"name":"n%d"}`, i)},
						})
						if resp.Status != 201 || resp.Replayed {
							b.Fatalf("status %d replayed %v: %s", resp.Status, resp.Replayed, resp.Body())
						}
					}
				})
			})
		}
	}
}

// BenchmarkSlowTransactionalNeighbours measures what a slow transactional
// handler does to everyone else's latency on SQLite, whose single writer
// it holds while it runs: one caller keeps running a transactional
// operation whose handler takes slow, while four callers run two-phase
// first executions of another operation; it reports their p50 and p99.
// On PostgreSQL the slow transaction holds a connection and its key's
// lock only, so the neighbours are measured there too, for comparison.
func BenchmarkSlowTransactionalNeighbours(b *testing.B) {
	for _, store := range []string{"sqlite", "pg"} {
		for _, slow := range []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s/slow=%s", store, slow), func(b *testing.B) {
				s, _ := benchStore(b, store)
				r := newBenchRunner(b, s, createOp(new(atomic.Int64)), showOp(), slowTxOp())
				ctx, stop := context.WithCancel(b.Context())
				var bg sync.WaitGroup
				if slow > 0 {
					bg.Go(func() {
						for i := 0; ctx.Err() == nil; i++ {
							r.Call(ctx, idem.Invocation{
								Operation: "thing.slow",
								Principal: agent2,
								Key:       fmt.Sprint("s", i),
								Intent:    idem.Intent{Body: fmt.Appendf(nil, `{"name":"s%d","delayMs":%d}`, i, slow.Milliseconds())},
							})
						}
					})
				}
				var (
					mu   sync.Mutex
					lats []time.Duration
					n    atomic.Int64
				)
				b.SetParallelism(4) // with -cpu 1: four callers
				b.RunParallel(func(pb *testing.PB) {
					var mine []time.Duration
					for pb.Next() {
						i := n.Add(1)
						t0 := time.Now()
						resp := r.Call(b.Context(), idem.Invocation{
							Operation: "thing.create",
							Principal: agent,
							Key:       fmt.Sprint("k", i),
							Intent:    idem.Intent{Body: fmt.Appendf(nil, `{"name":"n%d"}`, i)},
						})
						mine = append(mine, time.Since(t0))
						if resp.Status != 201 {
							b.Errorf("status %d: %s", resp.Status, resp.Body())
							return
						}
					}
					mu.Lock()
					lats = append(lats, mine...)
					mu.Unlock()
				})
				stop()
				bg.Wait()
				slices.Sort(lats)
				if len(lats) > 0 {
					b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
				}
			})
		}
	}
}

// ownWriteOp is thing.create, two-phase, whose handler writes one row in
// a transaction of its own: through the store's writer on SQLite
// (sqlitestore.Store.Write), through a pool of its own on PostgreSQL.
func ownWriteOp(b *testing.B, s idem.Store, url string) idem.Operation {
	write := func(ctx context.Context, name string) error {
		return s.(*sqlitestore.Store).Write(ctx, func(ctx context.Context, tx *sql.Tx) error { return sqlitetest.Effect(ctx, tx, name) })
	}
	if url != "" {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		write = func(ctx context.Context, name string) error {
			_, err := pool.Exec(ctx, `INSERT INTO storetest_effects (name) VALUES ($1)`, name)
			return err
		}
	}
	return idem.Define(createMeta(), func(ctx context.Context, call *idem.Call, in txIn) (thing, error) {
		if err := write(ctx, in.Name); err != nil {
			return thing{}, err
		}
		return thing{ID: "t_" + in.Name, Name: in.Name}, nil
	})
}

// slowTxOp is a transactional operation whose handler writes one row and
// then takes delayMs.
func slowTxOp() idem.Operation {
	m := createMeta()
	m.Name, m.Path, m.Retry.Transactional = "thing.slow", "/v1/slow-things", true
	type in struct {
		Name    string `json:"name"`
		DelayMs int    `json:"delayMs"`
	}
	return idem.Define(m, func(ctx context.Context, call *idem.Call, in in) (thing, error) {
		if err := writeEffect(ctx, call, in.Name); err != nil {
			return thing{}, err
		}
		select {
		case <-time.After(time.Duration(in.DelayMs) * time.Millisecond):
		case <-ctx.Done():
			return thing{}, ctx.Err()
		}
		return thing{ID: "t_" + in.Name, Name: in.Name}, nil
	})
}

// benchStore opens a store on a fresh database; on PostgreSQL with the
// effects table transactional handlers write into.
func benchStore(b *testing.B, name string) (idem.Store, string) {
	if name == "sqlite" {
		return newSQLiteStore(b, idem.SystemClock{}), ""
	}
	url := pgtest.NewDatabase(b)
	pgtest.EffectsDB(b, url)
	s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, url
}

func newBenchRunner(b *testing.B, s idem.Store, ops ...idem.Operation) *pipeline.Runner {
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		b.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	return r
}
