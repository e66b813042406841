package pgstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"idem"
	"idem/internal/fakeclock"
	"idem/internal/pgtest"
	"idem/pgstore"
)

// BenchmarkReserveComplete measures one keyed execution's two store
// transactions (Reserve of a fresh key, then Complete) on a database that
// already holds eight days of hourly records, swept with 24 h retention
// and the default week of audit retention, so that lookups see the
// partitions such a deployment keeps. Run with
//
//	scripts/test.sh -run '^$' -bench ReserveComplete ./pgstore/
func BenchmarkReserveComplete(b *testing.B) {
	url := pgtest.NewDatabase(b)
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC))
	s, err := pgstore.Open(b.Context(), url, idem.StoreConfig{Clock: clock})
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
	// Eight days of history: one record an hour, swept as the sweeper
	// would.
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
			Finish: idem.FinishParams{Org: scope.Org, ExecutionID: res.Attempt.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1},
		})
		return err
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := run(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
