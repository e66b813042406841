package pgstore_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// BenchmarkCompleteSet measures what one batch of k completions costs as
// the store runs it (completeSet: completeSQL for one, the set statement
// for more), in a transaction of its own on one connection, on the
// database BenchmarkReserveComplete sets up, analyzed before each batch
// size. The reservations are made between batches, outside the measure,
// so that few records are in flight. Besides the time per batch it reports the time per completion
// and, with IDEM_BENCH_PG_PID (see BenchmarkReserveComplete), the
// PostgreSQL CPU per completion. Run with
//
//	scripts/test.sh -run '^$' -bench CompleteSet ./pgstore/
func BenchmarkCompleteSet(b *testing.B) {
	url := pgtest.NewDatabase(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1 // the connection planned in the warm-up serves every batch
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := pgstore.Migrate(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	s, params := historyStore(b, pool)
	pid, _ := strconv.Atoi(os.Getenv("IDEM_BENCH_PG_PID"))
	n := 0
	batch := func(k int) []idem.CompleteParams {
		ps := make([]idem.CompleteParams, k)
		for i := range ps {
			n++
			res, err := s.Reserve(b.Context(), params(fmt.Sprint("k-", n)))
			if err != nil || !res.Reserved {
				b.Fatalf("reserve: %v, %v", res.Reserved, err)
			}
			a := res.Attempt
			ps[i] = idem.CompleteParams{Scope: a.Scope, Key: a.Key, FencingToken: a.FencingToken, Status: 200, Body: []byte(`{}`),
				Finish: idem.FinishParams{Org: a.Scope.Org, ExecutionID: a.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
					Events: []idem.AuditEvent{{ExecutionID: a.ExecutionID, Type: idem.EventSucceeded, Attempts: 1}}}}
		}
		return ps
	}
	complete := func(ps []idem.CompleteParams) {
		_, errs, err := pgstore.CompleteSet(b.Context(), s, ps)
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, k := range []int{1, 2, 4, 8, 16, 32, 64} {
		b.Run(fmt.Sprint("batch=", k), func(b *testing.B) {
			// Fresh statistics, as autovacuum keeps them: with those of
			// the history alone, both statements find executions through
			// the org's index (idem_executions_recent) and read the day's
			// partition.
			if _, err := pool.Exec(b.Context(), `ANALYZE`); err != nil {
				b.Fatal(err)
			}
			complete(batch(k)) // warm-up: the statement is planned
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				ps := batch(k)
				var before time.Duration
				if pid != 0 {
					before = clusterCPU(pid)
				}
				b.StartTimer()
				complete(ps)
				b.StopTimer()
				if pid != 0 {
					cpu += clusterCPU(pid) - before
				}
			}
			completions := float64(b.N * k)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/completions, "µs/completion")
			if pid != 0 {
				b.ReportMetric(float64(cpu.Microseconds())/completions, "dbcpu-µs/completion")
			}
		})
	}
}
