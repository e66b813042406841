package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/idem-run/idem"
)

const approvalColumns = `org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
	decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role`

// RequestApproval implements idem.Store. The single writer serialises it
// with Reserve, so the key's record it reads first is the one a
// reservation of the key would see.
func (s *Store) RequestApproval(ctx context.Context, p idem.RequestApprovalParams) (idem.RequestApprovalResult, error) {
	var (
		out      idem.Approval
		created  bool
		existing *idem.Attempt
	)
	err := s.write(ctx, "request approval", func(ctx context.Context, tx txn, now time.Time) error {
		out, created, existing = idem.Approval{}, false, nil
		if p.Key != "" {
			a, found, err := getAttempt(ctx, tx, idem.Scope{Org: p.Org, Principal: p.RequestedBy}, p.Key)
			if err != nil {
				return err
			}
			if found && !a.Forgotten(now) {
				a = a.Observe(now)
				existing = &a
				return nil
			}
		}
		// The newest approval of the intent that is Live at now.
		a, err := scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM idem_approvals
			WHERE org = ? AND requested_by = ? AND operation = ? AND fingerprint = ?
			AND status IN ('pending', 'approved', 'rejected') AND expires_at > ?
			ORDER BY created_at DESC, rowid DESC LIMIT 1`,
			p.Org, p.RequestedBy, p.Operation, p.Fingerprint, micros(now)))
		if err == nil {
			out = a.Observe(now)
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		expiry := p.Expiry
		if expiry == 0 {
			expiry = idem.DefaultApprovalExpiry
		}
		var input sql.NullString
		if len(p.Input) > 0 {
			input = sql.NullString{String: string(p.Input), Valid: true}
		}
		a, err = scanApproval(tx.QueryRowContext(ctx, `INSERT INTO idem_approvals
			(org, id, requested_by, operation, fingerprint, input, reason, status, created_at, expires_at, rule, approver_role)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)
			RETURNING `+approvalColumns,
			p.Org, p.ID, p.RequestedBy, p.Operation, p.Fingerprint, input, p.Reason, micros(now), micros(now.Add(expiry)), p.Rule, p.ApproverRole))
		if err != nil {
			return err
		}
		out, created = a.Observe(now), true
		return nil
	})
	if err != nil {
		return idem.RequestApprovalResult{}, err
	}
	if existing != nil {
		return idem.RequestApprovalResult{}, &idem.AttemptExistsError{Attempt: *existing}
	}
	return idem.RequestApprovalResult{Approval: out, Created: created}, nil
}

// GetApproval implements idem.Store.
func (s *Store) GetApproval(ctx context.Context, p idem.GetApprovalParams) (idem.Approval, error) {
	var out idem.Approval
	err := s.read(ctx, "get approval", func(tx txn, now time.Time) error {
		a, err := getApproval(ctx, tx, p.Org, p.ID)
		if err != nil {
			return err
		}
		out = a.Observe(now)
		return nil
	})
	if err != nil {
		return idem.Approval{}, err
	}
	return out, nil
}

// ListApprovals implements idem.Store. The status filter is the observed
// status: a pending or approved approval past its expiry counts as expired.
func (s *Store) ListApprovals(ctx context.Context, p idem.ListApprovalsParams) ([]idem.Approval, error) {
	var out []idem.Approval
	err := s.read(ctx, "list approvals", func(tx txn, now time.Time) error {
		where := []string{"org = ?"}
		args := []any{p.Org}
		if p.RequestedBy != "" {
			where = append(where, "requested_by = ?")
			args = append(args, p.RequestedBy)
		}
		switch p.Status {
		case "":
		case idem.ApprovalPending, idem.ApprovalApproved:
			where = append(where, "status = ? AND expires_at > ?")
			args = append(args, p.Status, micros(now))
		case idem.ApprovalExpired:
			where = append(where, "(status = 'expired' OR (status IN ('pending', 'approved') AND expires_at <= ?))")
			args = append(args, micros(now))
		default:
			where = append(where, "status = ?")
			args = append(args, p.Status)
		}
		limit := p.Limit
		if limit <= 0 {
			limit = 100
		}
		args = append(args, limit)
		rows, err := tx.QueryContext(ctx, `SELECT `+approvalColumns+` FROM idem_approvals
			WHERE `+strings.Join(where, " AND ")+`
			ORDER BY created_at DESC, rowid DESC LIMIT ?`, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanApproval(rows)
			if err != nil {
				return err
			}
			out = append(out, a.Observe(now))
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DecideApproval implements idem.Store.
func (s *Store) DecideApproval(ctx context.Context, p idem.DecideApprovalParams) (idem.Approval, error) {
	var out idem.Approval
	err := s.write(ctx, "decide approval", func(ctx context.Context, tx txn, now time.Time) error {
		a, err := getApproval(ctx, tx, p.Org, p.ID)
		if err != nil {
			return err
		}
		a = a.Observe(now)
		changed, err := a.Decide(p.Decision, now)
		if err != nil {
			return err
		}
		if changed {
			if _, err := tx.ExecContext(ctx, `UPDATE idem_approvals
				SET status = ?, decided_by = ?, decision_reason = ?, decided_at = ?
				WHERE org = ? AND id = ?`,
				a.Status, derefString(a.DecidedBy), derefString(a.DecisionReason), micros(*a.DecidedAt), a.Org, a.ID); err != nil {
				return err
			}
		}
		out = a.Observe(now)
		return nil
	})
	if err != nil {
		return idem.Approval{}, err
	}
	return out, nil
}

func getApproval(ctx context.Context, tx txn, org, id string) (idem.Approval, error) {
	a, err := scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM idem_approvals
		WHERE org = ? AND id = ?`, org, id))
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Approval{}, idem.Errorf(idem.CodeApprovalNotFound, "approval %q not found", id)
	}
	return a, err
}

func scanApproval(row interface{ Scan(...any) error }) (idem.Approval, error) {
	var (
		a                                     idem.Approval
		input, decidedBy, reason, executionID sql.NullString
		created, expires                      int64
		decidedAt, consumedAt                 sql.NullInt64
	)
	err := row.Scan(&a.Org, &a.ID, &a.RequestedBy, &a.Operation, &a.Fingerprint, &input, &a.Reason, &a.Status,
		&decidedBy, &reason, &created, &expires, &decidedAt, &consumedAt, &executionID, &a.Rule, &a.ApproverRole)
	if err != nil {
		return idem.Approval{}, err
	}
	if input.Valid {
		a.Input = []byte(input.String)
	}
	a.DecidedBy = stringPtr(decidedBy)
	a.DecisionReason = stringPtr(reason)
	a.CreatedAt = fromMicros(created)
	a.ExpiresAt = fromMicros(expires)
	a.DecidedAt = timePtr(decidedAt)
	a.ConsumedAt = timePtr(consumedAt)
	a.ExecutionID = stringPtr(executionID)
	return a, nil
}

func derefString(p *string) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *p, Valid: true}
}
