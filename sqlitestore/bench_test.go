package sqlitestore_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/sqlitestore"
)

// BenchmarkReserveComplete measures one keyed execution's two store
// transactions (Reserve of a fresh key, then Complete, with its final
// event), one after the other ("serial") and from several goroutines
// ("parallel", sharing commits). Besides ns/op it reports the CPU the
// process spends per execution (user and system, fsyncs included).
func BenchmarkReserveComplete(b *testing.B) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC))
	s, err := sqlitestore.Open(b.Context(), filepath.Join(b.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	scope := idem.Scope{Org: "acme", Principal: "bench"}
	var n atomic.Int64
	run := func() error {
		key := fmt.Sprint("k-", n.Add(1))
		res, err := s.Reserve(b.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "op", Fingerprint: "fp"},
			Key:         key, Lease: time.Minute, Retention: 24 * time.Hour,
		})
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
	serialAndParallel(b, run)
}

// serialAndParallel runs run as the sub-benchmarks "serial" and
// "parallel" (8 goroutines per core), each reporting the process CPU per
// call.
func serialAndParallel(b *testing.B, run func() error) {
	b.Run("serial", func(b *testing.B) {
		cpu := processCPU()
		for b.Loop() {
			if err := run(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	b.Run("parallel", func(b *testing.B) {
		cpu := processCPU()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := run(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
}

// processCPU is the user and system CPU this process has spent.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkAppendEvents measures, on an execution already replayed 1,000
// times (1,000 events appended one at a time after its own), appending one
// more event ("append": a replay's audit write) and reading the execution
// back ("get"), and reading one never replayed ("get-unreplayed", its
// two events), with the process CPU per call. Run it with a fixed
// -benchtime (1000x) so that every run's execution holds the same events.
func BenchmarkAppendEvents(b *testing.B) {
	clock := fakeclock.New(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC))
	s, err := sqlitestore.Open(b.Context(), filepath.Join(b.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	scope := idem.Scope{Org: "acme", Principal: "bench"}
	if _, err := s.StartExecution(b.Context(), idem.StartParams{ExecutionID: "exe_1", Scope: scope, Operation: "op", Fingerprint: "fp"}); err != nil {
		b.Fatal(err)
	}
	if err := s.FinishExecution(b.Context(), idem.FinishParams{Org: scope.Org, ExecutionID: "exe_1", Outcome: idem.OutcomeSucceeded, Attempts: 1,
		Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.StartExecution(b.Context(), idem.StartParams{ExecutionID: "exe_2", Scope: scope, Operation: "op", Fingerprint: "fp"}); err != nil {
		b.Fatal(err)
	}
	if err := s.FinishExecution(b.Context(), idem.FinishParams{Org: scope.Org, ExecutionID: "exe_2", Outcome: idem.OutcomeSucceeded, Attempts: 1,
		Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
		b.Fatal(err)
	}
	replay := func() error {
		return s.AppendEvents(b.Context(), idem.AppendEventsParams{Org: scope.Org, Events: []idem.AuditEvent{
			{ExecutionID: "exe_1", Type: idem.EventReplayed, Data: map[string]string{"requestId": "req_0123456789abcdef"}}}})
	}
	for range 1000 {
		if err := replay(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("append", func(b *testing.B) {
		cpu := processCPU()
		for b.Loop() {
			if err := replay(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	b.Run("get", func(b *testing.B) {
		cpu := processCPU()
		for b.Loop() {
			if _, err := s.GetExecution(b.Context(), idem.GetExecutionParams{Org: scope.Org, ID: "exe_1"}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
	b.Run("get-unreplayed", func(b *testing.B) {
		cpu := processCPU()
		for b.Loop() {
			if _, err := s.GetExecution(b.Context(), idem.GetExecutionParams{Org: scope.Org, ID: "exe_2"}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	})
}
