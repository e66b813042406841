package sqlitestore

import (
	"context"
	"time"

	"github.com/idem-run/idem"
)

// Sweep implements idem.Store. One IMMEDIATE transaction runs the bounded
// steps; concurrent sweepers serialize on the write lock, so each row is
// counted by exactly one of them.
func (s *Store) Sweep(ctx context.Context, p idem.SweepParams) (idem.SweepResult, error) {
	batch := p.BatchSize
	if batch <= 0 {
		batch = 500
	}
	var out idem.SweepResult
	err := s.write(ctx, "sweep", func(ctx context.Context, tx txn, now time.Time) error {
		steps := []struct {
			count *int
			sql   string
		}{
			// Records past retention are forgotten, but never one in
			// flight within its lease.
			{&out.Forgotten, `DELETE FROM idem_attempts WHERE rowid IN (
				SELECT rowid FROM idem_attempts WHERE expires_at <= ?1 AND NOT (state = 'in_flight' AND lease_expires_at > ?1) LIMIT ?2)`},
			// Secret ciphertexts past their window are destroyed; the record
			// stays as a tombstone.
			{&out.SecretsDestroyed, `UPDATE idem_attempts
				SET body = NULL, state = CASE state WHEN 'completed' THEN 'expired' ELSE state END
				WHERE rowid IN (SELECT rowid FROM idem_attempts
					WHERE body IS NOT NULL AND secret_expires_at <= ? LIMIT ?)`},
			// In-flight records past their lease are indeterminate (no status).
			{&out.LeasesExpired, `UPDATE idem_attempts SET state = 'indeterminate'
				WHERE rowid IN (SELECT rowid FROM idem_attempts
					WHERE state = 'in_flight' AND lease_expires_at <= ? LIMIT ?)`},
			// Pending or approved approvals past expiry are expired.
			{&out.ApprovalsExpired, `UPDATE idem_approvals SET status = 'expired'
				WHERE rowid IN (SELECT rowid FROM idem_approvals
					WHERE status IN ('pending', 'approved') AND expires_at <= ? LIMIT ?)`},
		}
		for _, step := range steps {
			res, err := tx.ExecContext(ctx, step.sql, micros(now), batch)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			*step.count = int(n)
		}
		if p.AuditRetention <= 0 {
			return nil
		}
		// The oldest executions started before the window, at most batch
		// of them, go with all their events (first: they reference the
		// execution). Both statements pick the same executions: one order,
		// in one transaction.
		cutoff := micros(now.Add(-p.AuditRetention))
		for _, step := range []struct {
			count *int
			sql   string
		}{
			{&out.EventsRemoved, `DELETE FROM idem_audit_events WHERE (org, execution_id) IN (
				SELECT org, id FROM idem_executions WHERE started_at <= ?1 ORDER BY started_at, rowid LIMIT ?2)`},
			{&out.ExecutionsRemoved, `DELETE FROM idem_executions WHERE rowid IN (
				SELECT rowid FROM idem_executions WHERE started_at <= ?1 ORDER BY started_at, rowid LIMIT ?2)`},
		} {
			res, err := tx.ExecContext(ctx, step.sql, cutoff, batch)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			*step.count = int(n)
		}
		return nil
	})
	if err != nil {
		return idem.SweepResult{}, err
	}
	return out, nil
}
