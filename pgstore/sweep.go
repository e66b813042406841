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

// Each sweep step takes at most $2 rows with FOR UPDATE SKIP LOCKED, so that
// concurrent sweepers split the work instead of queueing, and rows a
// reservation or completion holds are left for a later round. MATERIALIZED
// keeps the locked batch from being re-planned into the outer statement.
var sweepSteps = []struct {
	name string
	sql  string
}{
	// Rows in time partitions go with their partition
	// (maintainPartitions); only the DEFAULT partition is swept by row. A
	// record in flight within its lease is never forgotten.
	{"forget attempts", `WITH batch AS MATERIALIZED (
			SELECT org, principal, key, created_at FROM idem_attempts_default
			WHERE expires_at <= $1 AND NOT (state = 'in_flight' AND lease_expires_at > $1)
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM idem_attempts_default a USING batch b
		WHERE a.org = b.org AND a.principal = b.principal AND a.key = b.key AND a.created_at = b.created_at`},
	// The ciphertext goes; the record stays as a tombstone. (A secret
	// attempt left indeterminate keeps its state.)
	{"destroy secrets", `WITH batch AS MATERIALIZED (
			SELECT org, principal, key, created_at FROM idem_attempts
			WHERE body IS NOT NULL AND secret_expires_at <= $1 AND expires_at > $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE idem_attempts a
		SET body = NULL, state = CASE a.state WHEN 'completed' THEN 'expired' ELSE a.state END
		FROM batch b
		WHERE a.org = b.org AND a.principal = b.principal AND a.key = b.key AND a.created_at = b.created_at`},
	// The status stays NULL: nothing is known about the result.
	{"expire leases", `WITH batch AS MATERIALIZED (
			SELECT org, principal, key, created_at FROM idem_attempts
			WHERE state = 'in_flight' AND lease_expires_at <= $1 AND expires_at > $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE idem_attempts a SET state = 'indeterminate'
		FROM batch b
		WHERE a.org = b.org AND a.principal = b.principal AND a.key = b.key AND a.created_at = b.created_at`},
	{"expire approvals", `WITH batch AS MATERIALIZED (
			SELECT org, id FROM idem_approvals
			WHERE status IN ('pending', 'approved') AND expires_at <= $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE idem_approvals a SET status = 'expired'
		FROM batch b
		WHERE a.org = b.org AND a.id = b.id`},
}

// auditSweepSteps remove, past the audit retention ($1 is the window's
// start), the executions and events of the DEFAULT partitions, $2 rows at
// most each; the rest go with their partition. An execution and its events
// may sit in different partitions, so each table is swept on its own: an
// event left after its execution is never read (GetExecution finds no
// execution first, and no event is appended to a missing execution), and
// goes when its own time is past the window.
var auditSweepSteps = []struct {
	name string
	sql  string
}{
	{"remove executions", `WITH batch AS MATERIALIZED (
			SELECT org, id, started_at FROM idem_executions_default WHERE started_at <= $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM idem_executions_default x USING batch b
		WHERE x.org = b.org AND x.id = b.id AND x.started_at = b.started_at`},
	{"remove events", `WITH batch AS MATERIALIZED (
			SELECT org, id, at FROM idem_audit_events_default WHERE at <= $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM idem_audit_events_default e USING batch b
		WHERE e.org = b.org AND e.id = b.id AND e.at = b.at`},
}

// Sweep runs the row steps in one transaction and counts what each did,
// then creates and drops the partitions of attempts, executions and
// events, each change in a transaction of its own (maintainPartitions).
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
	res := idem.SweepResult{Forgotten: counts[0], SecretsDestroyed: counts[1], LeasesExpired: counts[2], ApprovalsExpired: counts[3],
		ExecutionsRemoved: removed[0], EventsRemoved: removed[1]}
	res.PartitionsCreated, res.PartitionsDropped, err = s.maintainPartitions(ctx, attemptPartitions, now, time.Time{})
	if err != nil {
		return idem.SweepResult{}, err
	}
	for _, t := range []partitioned{executionPartitions, eventPartitions} {
		created, dropped, err := s.maintainPartitions(ctx, t, now, keepFrom)
		if err != nil {
			return idem.SweepResult{}, err
		}
		res.AuditPartitionsCreated += created
		res.AuditPartitionsDropped += dropped
	}
	return res, nil
}
