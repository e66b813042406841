package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// defaultBatchSize caps each sweep step when SweepParams.BatchSize is 0.
const defaultBatchSize = 500

// sweepSteps are the row steps of Sweep, in order ($1 now, $2 the batch
// size): each takes its batch with FOR UPDATE SKIP LOCKED, so that
// concurrent sweepers split the work (sql/sweep.sql).
var sweepSteps = []struct {
	name string
	sql  string
}{
	{"forget attempts", section("sweep", "forget_attempts")},
	{"destroy secrets", section("sweep", "destroy_secrets")},
	{"expire leases", section("sweep", "expire_leases")},
	{"expire approvals", section("sweep", "expire_approvals")},
}

// auditSweepSteps remove, past the audit retention ($1 the window's
// start, $2 the batch size), executions and appended events, each table
// on its own (sql/sweep.sql).
var auditSweepSteps = []struct {
	name string
	sql  string
}{
	{"remove executions", section("sweep", "remove_executions")},
	{"remove events", section("sweep", "remove_events")},
}

// Sweep runs the row steps in one transaction and counts what each did.
func (s *Store) Sweep(ctx context.Context, p idem.SweepParams) (idem.SweepResult, error) {
	now := s.now()
	batch := p.BatchSize
	if batch <= 0 {
		batch = defaultBatchSize
	}
	var keepFrom time.Time // zero: audit kept forever
	if p.AuditRetention > 0 {
		keepFrom = now.Add(-p.AuditRetention)
	}
	var counts [4]int
	var removed [2]int
	err := s.inTx(ctx, "sweep", func(tx pgx.Tx) error {
		for i, step := range sweepSteps {
			tag, err := tx.Exec(ctx, step.sql, now, batch)
			if err != nil {
				return fmt.Errorf("%s: %w", step.name, err)
			}
			counts[i] = int(tag.RowsAffected())
		}
		if keepFrom.IsZero() {
			return nil
		}
		for i, step := range auditSweepSteps {
			tag, err := tx.Exec(ctx, step.sql, keepFrom, batch)
			if err != nil {
				return fmt.Errorf("%s: %w", step.name, err)
			}
			removed[i] = int(tag.RowsAffected())
		}
		return nil
	})
	if err != nil {
		return idem.SweepResult{}, err
	}
	return idem.SweepResult{Forgotten: counts[0], SecretsDestroyed: counts[1], LeasesExpired: counts[2], ApprovalsExpired: counts[3],
		ExecutionsRemoved: removed[0], EventsRemoved: removed[1]}, nil
}
