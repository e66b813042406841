package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/sqlitestore"
)

// BenchmarkTransact measures one keyed transactional execution (Transact
// of a fresh key whose handler inserts one row of the application's own,
// then stores a 201 with its final event), one after the other ("serial")
// and from several goroutines ("parallel", sharing commits), with the CPU
// the process spends per execution.
func BenchmarkTransact(b *testing.B) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC))
	s, err := sqlitestore.Open(b.Context(), filepath.Join(b.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Write(b.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE bench_things (id TEXT PRIMARY KEY, n INTEGER NOT NULL) STRICT`)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	scope := idem.Scope{Org: "acme", Principal: "bench"}
	var n atomic.Int64
	run := func() error {
		i := n.Add(1)
		key := fmt.Sprint("k-", i)
		res, err := s.Transact(b.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "op", Fingerprint: "fp"},
			Key:         key, Lease: time.Minute, Retention: 24 * time.Hour,
		}, func(ctx context.Context, tx any) idem.TxOutcome {
			if _, err := tx.(*sql.Tx).ExecContext(ctx, `INSERT INTO bench_things (id, n) VALUES (?, ?)`, key, i); err != nil {
				return idem.TxOutcome{Abort: true}
			}
			return idem.TxOutcome{Result: idem.CompleteParams{Status: 201, Body: []byte(`{}`),
				Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1,
					Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}}
		})
		if err != nil {
			return err
		}
		if !res.Committed {
			return fmt.Errorf("%s not committed: %+v", key, res)
		}
		return nil
	}
	serialAndParallel(b, run)
}
