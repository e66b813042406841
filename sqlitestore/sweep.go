package sqlitestore

import (
	"context"
	"time"

	"github.com/idem-run/idem"
)

// Sweep implements idem.Store. One IMMEDIATE transaction runs the bounded
// steps, each on the partial index of idem_records made for it (migration
// 005); concurrent sweepers serialize on the write lock, so each row is
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
			// flight within its lease: the row gives up its key and its
			// result; its execution stays until the audit retention.
			{&out.Forgotten, `UPDATE idem_records SET held = 0, headers = NULL, body = NULL
				WHERE rowid IN (SELECT rowid FROM idem_records
					WHERE held = 1 AND expires_at <= ?1 AND NOT (state = 'in_flight' AND lease_expires_at > ?1) LIMIT ?2)`},
			// Secret ciphertexts past their window are destroyed; the record
			// stays as a tombstone.
			{&out.SecretsDestroyed, `UPDATE idem_records
				SET body = NULL, state = CASE state WHEN 'completed' THEN 'expired' ELSE state END
				WHERE rowid IN (SELECT rowid FROM idem_records
					WHERE secret_expires_at IS NOT NULL AND body IS NOT NULL AND secret_expires_at <= ?1 LIMIT ?2)`},
			// In-flight records past their lease are indeterminate (no status).
			{&out.LeasesExpired, `UPDATE idem_records SET state = 'indeterminate'
				WHERE rowid IN (SELECT rowid FROM idem_records
					WHERE state = 'in_flight' AND held = 1 AND lease_expires_at <= ?1 LIMIT ?2)`},
			// Pending or approved approvals past expiry are expired.
			{&out.ApprovalsExpired, `UPDATE idem_approvals SET status = 'expired'
				WHERE rowid IN (SELECT rowid FROM idem_approvals
					WHERE status IN ('pending', 'approved') AND expires_at <= ?1 LIMIT ?2)`},
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
		// The oldest executions started before the window that no longer
		// hold a key (forgotten above, released, or unkeyed), at most
		// batch of them, go with all their events. A record still holding
		// its key is within retention (or is forgotten by a later round),
		// since the audit retention is at least the attempt retention.
		// First at most batch of the events appended to them (rows of
		// idem_audit_events), then those of them with none left, one row
		// each: an execution with more appended events than a batch goes
		// in a later round, and no appended event outlives its execution.
		const candidates = `SELECT rowid, org, id FROM idem_records
			WHERE held = 0 AND started_at <= ?1 ORDER BY started_at, rowid LIMIT ?2`
		cutoff := micros(now.Add(-p.AuditRetention))
		res, err := tx.ExecContext(ctx, `DELETE FROM idem_audit_events WHERE rowid IN (
			SELECT v.rowid FROM (`+candidates+`) c
			JOIN idem_audit_events v ON v.org = c.org AND v.execution_id = c.id LIMIT ?2)`, cutoff, batch)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		out.EventsRemoved = int(n)
		rows, err := tx.QueryContext(ctx, `DELETE FROM idem_records WHERE rowid IN (
			SELECT c.rowid FROM (`+candidates+`) c
			WHERE NOT EXISTS (SELECT 1 FROM idem_audit_events v WHERE v.org = c.org AND v.execution_id = c.id))
			RETURNING json_array_length(events)`, cutoff, batch)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var events int
			if err := rows.Scan(&events); err != nil {
				return err
			}
			out.ExecutionsRemoved++
			out.EventsRemoved += events
		}
		return rows.Err()
	})
	if err != nil {
		return idem.SweepResult{}, err
	}
	return out, nil
}
