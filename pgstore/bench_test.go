package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// BenchmarkReserveComplete measures one keyed execution's two store
// transactions (Reserve of a fresh key, then Complete) on a database that
// already holds eight days of hourly records, swept with 24 h retention
// and the default week of audit retention, so that lookups see the
// partitions such a deployment keeps. Besides ns/op it reports the round
// trips and statements (BEGIN and COMMIT not counted) each execution
// sends, and, when IDEM_BENCH_PG_PID names the postmaster of a server on
// this machine that serves nothing else, the CPU its processes spend per
// execution. Run with
//
//	scripts/test.sh -run '^$' -bench ReserveComplete ./pgstore/
func BenchmarkReserveComplete(b *testing.B) {
	url := pgtest.NewDatabase(b)
	var trace tracer
	pool := openTraced(b, url, &trace)
	s, params := historyStore(b, pool)
	scope := params("").Scope

	var n atomic.Int64
	run := func() error {
		key := fmt.Sprint("k-", n.Add(1))
		res, err := s.Reserve(b.Context(), params(key))
		if err != nil {
			return err
		}
		if !res.Reserved {
			return fmt.Errorf("%s not reserved", key)
		}
		_, err = s.Complete(b.Context(), idem.CompleteParams{
			Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken, Status: 200, Body: []byte(`{}`),
			Finish: idem.FinishParams{Org: scope.Org, ExecutionID: res.Attempt.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
				Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}},
		})
		return err
	}
	// transact is the transactional shape: the reservation, one handler
	// write and the completion in one transaction, one commit.
	transact := func() error {
		key := fmt.Sprint("t-", n.Add(1))
		res, err := s.Transact(b.Context(), params(key), func(ctx context.Context, tx any) idem.TxOutcome {
			if _, err := tx.(pgx.Tx).Exec(ctx, `INSERT INTO bench_effects (name) VALUES ($1)`, key); err != nil {
				return idem.TxOutcome{Abort: true}
			}
			return idem.TxOutcome{Result: idem.CompleteParams{Status: 200, Body: []byte(`{}`),
				Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1,
					Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}}
		})
		if err == nil && !res.Committed {
			err = fmt.Errorf("%s not committed: %+v", key, res)
		}
		return err
	}
	// withWrite is the two-phase shape with the same handler write, in a
	// transaction of its own between the phases.
	withWrite := func() error {
		key := fmt.Sprint("w-", n.Add(1))
		res, err := s.Reserve(b.Context(), params(key))
		if err != nil {
			return err
		}
		if _, err := pool.Exec(b.Context(), `INSERT INTO bench_effects (name) VALUES ($1)`, key); err != nil {
			return err
		}
		_, err = s.Complete(b.Context(), idem.CompleteParams{
			Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken, Status: 200, Body: []byte(`{}`),
			Finish: idem.FinishParams{Org: scope.Org, ExecutionID: res.Attempt.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
				Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}},
		})
		return err
	}
	if _, err := pool.Exec(b.Context(), `CREATE TABLE bench_effects (name text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	// Sub-benchmarks: serial and parallel; the sub-benchmark names
	// without a shape are Reserve+Complete alone, as before.
	for _, shape := range []struct {
		name string
		run  func() error
	}{{"", run}, {"two-phase+write/", withWrite}, {"transactional/", transact}} {
		b.Run(shape.name+"serial", func(b *testing.B) {
			m := startMeasure(&trace)
			for b.Loop() {
				if err := shape.run(); err != nil {
					b.Fatal(err)
				}
			}
			m.report(b)
		})
		b.Run(shape.name+"parallel", func(b *testing.B) {
			m := startMeasure(&trace)
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := shape.run(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			m.report(b)
		})
	}
}

// historyStore is a store on pool whose database holds eight days of
// hourly records, swept with 24 h retention and the default week of audit
// retention, as BenchmarkReserveComplete describes; params are the
// reservation parameters of a key.
func historyStore(b *testing.B, pool *pgxpool.Pool) (*pgstore.Store, func(key string) idem.ReserveParams) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC))
	s, err := pgstore.New(b.Context(), pool, idem.StoreConfig{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	scope := idem.Scope{Org: "acme", Principal: "bench"}
	params := func(key string) idem.ReserveParams {
		return idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "op", Fingerprint: "fp"},
			Key:         key, Lease: time.Minute, Retention: 24 * time.Hour,
		}
	}
	sweep := idem.SweepParams{AuditRetention: 7 * 24 * time.Hour}
	for h := range 8 * 24 {
		if _, err := s.Reserve(b.Context(), params(fmt.Sprint("history-", h))); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Sweep(b.Context(), sweep); err != nil {
			b.Fatal(err)
		}
		clock.Advance(time.Hour)
	}
	if _, err := s.Sweep(b.Context(), sweep); err != nil {
		b.Fatal(err)
	}
	return s, params
}

// openTraced opens a migrated pool on url whose connections count their
// round trips and statements in t.
func openTraced(b testing.TB, url string, t *tracer) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = pgstore.DefaultMaxConns
	cfg.ConnConfig.Tracer = t
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := pgstore.Migrate(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	return pool
}

// tracer counts what a pool sends: round trips (a query or a batch),
// statements, and BEGIN, COMMIT and ROLLBACK apart (txControl), wherever
// they travel; txOnly counts the round trips that carried nothing else.
// A batch's statements are counted when it is sent.
type tracer struct{ roundTrips, statements, txControl, txOnly atomic.Int64 }

// isTxControl reports whether sql begins or ends a transaction.
func isTxControl(sql string) bool {
	switch strings.ToLower(strings.Fields(sql + " x")[0]) {
	case "begin", "commit", "rollback":
		return true
	}
	return false
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.roundTrips.Add(1)
	if isTxControl(d.SQL) {
		t.txControl.Add(1)
		t.txOnly.Add(1)
	} else {
		t.statements.Add(1)
	}
	return ctx
}

func (t *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	t.roundTrips.Add(1)
	control := 0
	for _, q := range d.Batch.QueuedQueries {
		if isTxControl(q.SQL) {
			control++
		}
	}
	t.txControl.Add(int64(control))
	t.statements.Add(int64(len(d.Batch.QueuedQueries) - control))
	if control == len(d.Batch.QueuedQueries) {
		t.txOnly.Add(1)
	}
	return ctx
}

func (t *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// measure holds the counters at the start of a benchmark.
type measure struct {
	t                                         *tracer
	roundTrips, statements, txControl, txOnly int64
	dbCPU                                     time.Duration
	dbPID                                     int
}

func startMeasure(t *tracer) measure {
	m := measure{t: t, roundTrips: t.roundTrips.Load(), statements: t.statements.Load(), txControl: t.txControl.Load(), txOnly: t.txOnly.Load()}
	if pid, err := strconv.Atoi(os.Getenv("IDEM_BENCH_PG_PID")); err == nil {
		m.dbPID = pid
		m.dbCPU = clusterCPU(pid)
	}
	return m
}

func (m measure) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64(m.t.roundTrips.Load()-m.roundTrips)/n, "roundtrips/op")
	b.ReportMetric(float64(m.t.statements.Load()-m.statements)/n, "stmts/op")
	b.ReportMetric(float64(m.t.txControl.Load()-m.txControl)/n, "begin+commit/op")
	if m.dbPID != 0 {
		b.ReportMetric(float64((clusterCPU(m.dbPID)-m.dbCPU).Microseconds())/n, "dbcpu-µs/op")
	}
}

// clusterCPU is the user and system CPU spent so far by the postmaster pid,
// its live children and its children that have exited.
func clusterCPU(pid int) time.Duration {
	const tick = 10 * time.Millisecond // USER_HZ = 100
	fields := func(p string) []string {
		b, err := os.ReadFile(filepath.Join("/proc", p, "stat"))
		if err != nil {
			return nil
		}
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3 (state)
	}
	sum := func(f []string, idx ...int) (t time.Duration) {
		for _, i := range idx {
			v, _ := strconv.ParseInt(f[i-3], 10, 64)
			t += time.Duration(v) * tick
		}
		return t
	}
	total := time.Duration(0)
	if f := fields(strconv.Itoa(pid)); f != nil {
		total += sum(f, 14, 15, 16, 17) // utime, stime, cutime, cstime
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if f := fields(p.Name()); len(f) > 15 && f[1] == strconv.Itoa(pid) { // field 4: ppid
			total += sum(f, 14, 15)
		}
	}
	return total
}
