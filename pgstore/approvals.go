package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// The statements of approvals; their files in sql/ say what they take and
// return.
var (
	lockIntentSQL      = statement("lock_intent")
	getLiveApprovalSQL = statement("get_live_approval")
	insertApprovalSQL  = statement("insert_approval")
	// getApprovalSQL reads an approval; lockApprovalSQL also locks it.
	getApprovalSQL    = section("get_approval", "read")
	lockApprovalSQL   = section("get_approval", "for_update")
	decideApprovalSQL = statement("decide_approval")
	// The forms of ListApprovals, by the status it filters by.
	listApprovalsSQL         = section("list_approvals", "all")
	listLiveApprovalsSQL     = section("list_approvals", "live")
	listExpiredApprovalsSQL  = section("list_approvals", "expired")
	listApprovalsByStatusSQL = section("list_approvals", "status")
)

// RequestApproval returns the intent's live approval or creates a pending
// one. A transaction-scoped advisory lock on the intent makes concurrent
// requests, from any instance, queue: each reads after the previous one
// committed, so they share one approval. A keyed request first takes the
// key's lock, the one Reserve takes, and reads the key's record: a
// reservation of the key is then either committed and seen, or not yet
// begun and unable to consume the approval until this transaction ends.
// Locks are taken in one order, key then intent, so requests cannot
// deadlock on them.
func (s *Store) RequestApproval(ctx context.Context, p idem.RequestApprovalParams) (idem.RequestApprovalResult, error) {
	now := s.now()
	expiry := p.Expiry
	if expiry == 0 {
		expiry = idem.DefaultApprovalExpiry
	}
	var (
		a        idem.Approval
		created  bool
		existing *idem.Attempt
	)
	err := s.inTx(ctx, "request approval", func(tx pgx.Tx) error {
		created, existing = false, nil
		if p.Key != "" {
			rec, found, err := lockKeyAndRead(ctx, tx, idem.Scope{Org: p.Org, Principal: p.RequestedBy}, p.Key)
			if err != nil {
				return err
			}
			if found && !rec.Forgotten(now) {
				rec = rec.Observe(now)
				existing = &rec
				return nil
			}
		}
		intent := p.Org + "/" + p.RequestedBy + "/" + p.Operation + "/" + p.Fingerprint
		if _, err := tx.Exec(ctx, lockIntentSQL, intent); err != nil {
			return err
		}
		var err error
		a, err = scanApproval(tx.QueryRow(ctx, getLiveApprovalSQL, p.Org, p.RequestedBy, p.Operation, p.Fingerprint, now))
		if err == nil && a.Observe(now).Live(now) {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		created = true
		a, err = scanApproval(tx.QueryRow(ctx, insertApprovalSQL, p.Org, p.ID, p.RequestedBy, p.Operation, p.Fingerprint,
			[]byte(p.Input), p.Reason, now, now.Add(expiry), p.Rule, p.ApproverRole))
		return err
	})
	if err != nil {
		return idem.RequestApprovalResult{}, err
	}
	if existing != nil {
		return idem.RequestApprovalResult{}, &idem.AttemptExistsError{Attempt: *existing}
	}
	return idem.RequestApprovalResult{Approval: a.Observe(now), Created: created}, nil
}

// GetApproval reads an approval of p.Org.
func (s *Store) GetApproval(ctx context.Context, p idem.GetApprovalParams) (idem.Approval, error) {
	now := s.now()
	var a idem.Approval
	err := s.inTx(ctx, "get approval", func(tx pgx.Tx) error {
		var err error
		a, err = getApproval(ctx, tx, getApprovalSQL, p.Org, p.ID)
		return err
	})
	if err != nil {
		return idem.Approval{}, err
	}
	return a.Observe(now), nil
}

// ListApprovals filters by observed status in SQL, so that LIMIT counts
// only matching rows.
func (s *Store) ListApprovals(ctx context.Context, p idem.ListApprovalsParams) ([]idem.Approval, error) {
	now := s.now()
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	query, args := listApprovalsSQL, []any{p.Org, p.RequestedBy}
	switch p.Status {
	case "":
	case idem.ApprovalPending, idem.ApprovalApproved:
		query, args = listLiveApprovalsSQL, append(args, string(p.Status), now)
	case idem.ApprovalExpired:
		query, args = listExpiredApprovalsSQL, append(args, now)
	default:
		query, args = listApprovalsByStatusSQL, append(args, string(p.Status))
	}
	args = append(args, limit)
	var list []idem.Approval
	err := s.inTx(ctx, "list approvals", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		list, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (idem.Approval, error) {
			a, err := scanApproval(row)
			return a.Observe(now), err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// DecideApproval locks the approval, applies Approval.Decide to it as
// observed now and writes it back if the decision changed it.
func (s *Store) DecideApproval(ctx context.Context, p idem.DecideApprovalParams) (idem.Approval, error) {
	now := s.now()
	var a idem.Approval
	err := s.inTx(ctx, "decide approval", func(tx pgx.Tx) error {
		var err error
		if a, err = getApproval(ctx, tx, lockApprovalSQL, p.Org, p.ID); err != nil {
			return err
		}
		a = a.Observe(now)
		changed, err := a.Decide(p.Decision, now)
		if err != nil || !changed {
			return err
		}
		_, err = tx.Exec(ctx, decideApprovalSQL, p.Org, p.ID, string(a.Status), a.DecidedBy, a.DecisionReason, a.DecidedAt)
		return err
	})
	if err != nil {
		return idem.Approval{}, err
	}
	return a.Observe(now), nil
}

// getApproval reads one approval with query (getApprovalSQL or
// lockApprovalSQL); APPROVAL_NOT_FOUND when org has none with that id.
func getApproval(ctx context.Context, tx pgx.Tx, query, org, id string) (idem.Approval, error) {
	a, err := scanApproval(tx.QueryRow(ctx, query, org, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Approval{}, idem.Errorf(idem.CodeApprovalNotFound, "no approval %q", id).WithDetail("approvalId", id)
	}
	return a, err
}

// scanApproval reads one approval: org, id, requested_by, operation,
// fingerprint, input, reason, status, decided_by, decision_reason,
// created_at, expires_at, decided_at, consumed_at, execution_id, rule,
// approver_role.
func scanApproval(row scanner) (idem.Approval, error) {
	var (
		a                                   idem.Approval
		status                              string
		input                               []byte
		created, expires, decided, consumed *time.Time
	)
	err := row.Scan(&a.Org, &a.ID, &a.RequestedBy, &a.Operation, &a.Fingerprint, &input, &a.Reason, &status,
		&a.DecidedBy, &a.DecisionReason, &created, &expires, &decided, &consumed, &a.ExecutionID, &a.Rule, &a.ApproverRole)
	if err != nil {
		return idem.Approval{}, err
	}
	a.Status = idem.ApprovalStatus(status)
	if input != nil {
		a.Input = input
	}
	a.CreatedAt, a.ExpiresAt = utc(created), utc(expires)
	a.DecidedAt, a.ConsumedAt = utcPtr(decided), utcPtr(consumed)
	return a, nil
}
