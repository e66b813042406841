package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"time"

	"github.com/idem-run/idem/canonical"
)

// The runner's system calls: approvals (SPEC §8), executions and attempt
// records (SPEC §10.1), with their visibility rules. Surfaces wrap them in
// the success envelope.

// ListApprovals returns the approvals p may see, newest first: every
// approval of the org for an approver, its own requests for anyone else.
func (r *Runner) ListApprovals(ctx context.Context, p idem.Principal, status idem.ApprovalStatus) ([]idem.Approval, error) {
	params := idem.ListApprovalsParams{Org: p.Org, Status: status}
	if !p.HasRole(idem.RoleApprover) {
		params.RequestedBy = p.ID
	}
	list, err := r.cfg.Store.ListApprovals(ctx, params)
	if err != nil {
		return nil, storeFailure(ctx, err)
	}
	return list, nil
}

// GetApproval returns an approval its requester or an approver of its org
// may see; APPROVAL_NOT_FOUND for anyone else.
func (r *Runner) GetApproval(ctx context.Context, p idem.Principal, id string) (idem.Approval, error) {
	if canonical.CheckString(id) != nil {
		return idem.Approval{}, approvalNotFound(id) // no store holds such an id
	}
	a, err := r.cfg.Store.GetApproval(ctx, idem.GetApprovalParams{Org: p.Org, ID: id})
	if idem.ErrorCode(err) == idem.CodeApprovalNotFound {
		return idem.Approval{}, approvalNotFound(id) // worded as one not visible
	}
	if err != nil {
		return idem.Approval{}, storeFailure(ctx, err)
	}
	if a.RequestedBy != p.ID && !p.HasRole(idem.RoleApprover) && !p.HasRole(a.DecidedByRole()) {
		return idem.Approval{}, approvalNotFound(id)
	}
	return a, nil
}

// approvalNotFound answers an unknown approval and one the caller may not
// see alike, so that no answer tells them apart.
func approvalNotFound(id string) *idem.Error {
	return idem.Errorf(idem.CodeApprovalNotFound, "no approval %q visible to this caller", id).WithDetail("approvalId", id)
}

// DecideApproval approves or rejects an approval, checking in the order of
// SPEC §8: unknown or another org's → APPROVAL_NOT_FOUND; no approver role
// → FORBIDDEN; the requester → SELF_APPROVAL_FORBIDDEN; then the state
// rules of Approval.Decide.
func (r *Runner) DecideApproval(ctx context.Context, p idem.Principal, id string, approve bool, reason string) (idem.Approval, error) {
	if err := canonical.CheckString(reason); err != nil {
		return idem.Approval{}, idem.InvalidInput([]map[string]string{{"path": "/reason", "message": err.Error()}})
	}
	if canonical.CheckString(id) != nil {
		return idem.Approval{}, approvalNotFound(id)
	}
	a, err := r.cfg.Store.GetApproval(ctx, idem.GetApprovalParams{Org: p.Org, ID: id})
	if idem.ErrorCode(err) == idem.CodeApprovalNotFound {
		return idem.Approval{}, approvalNotFound(id)
	}
	if err != nil {
		return idem.Approval{}, storeFailure(ctx, err)
	}
	if role := a.DecidedByRole(); !p.HasRole(role) {
		// A configured rule may name another role than approver.
		return idem.Approval{}, idem.Errorf(idem.CodeForbidden, "deciding approval %s needs the %s role", id, role).WithDetail("approvalId", id)
	}
	if a.RequestedBy == p.ID {
		return idem.Approval{}, idem.Errorf(idem.CodeSelfApprovalForbidden, "approval %s was requested by you; another approver must decide it", id).WithDetail("approvalId", id)
	}
	decided, err := r.cfg.Store.DecideApproval(ctx, idem.DecideApprovalParams{Org: p.Org, ID: id, Decision: idem.Decision{Approve: approve, By: p.ID, Reason: reason}})
	if err != nil {
		return idem.Approval{}, storeFailure(ctx, err)
	}
	return decided, nil
}

// flushWait bounds how long reading executions waits for the audit queue
// (replay events, fresh reads).
const flushWait = 2 * time.Second

// GetExecution returns an execution with its audit events to its own
// principal and to approvers of its org; NOT_FOUND for anyone else.
func (r *Runner) GetExecution(ctx context.Context, p idem.Principal, id string) (idem.Execution, error) {
	// An unknown execution and one the caller may not see answer alike.
	notFound := idem.Errorf(idem.CodeNotFound, "no execution %q visible to this caller", id)
	// Replay events and fresh reads are written off the request path:
	// show the ones this instance has answered so far.
	fctx, cancel := context.WithTimeout(ctx, flushWait)
	_ = r.Flush(fctx)
	cancel()
	if canonical.CheckString(id) != nil {
		return idem.Execution{}, notFound // no store holds such an id
	}
	x, err := r.cfg.Store.GetExecution(ctx, idem.GetExecutionParams{Org: p.Org, ID: id})
	if idem.ErrorCode(err) == idem.CodeNotFound {
		return idem.Execution{}, notFound
	}
	if err != nil {
		return idem.Execution{}, storeFailure(ctx, err)
	}
	if x.Principal != p.ID && !p.HasRole(idem.RoleApprover) {
		return idem.Execution{}, notFound
	}
	return x, nil
}

// GetAttempt returns the caller's own attempt record for key.
func (r *Runner) GetAttempt(ctx context.Context, p idem.Principal, key string) (idem.AttemptView, error) {
	if err := idem.ValidateKey(key); err != nil {
		return idem.AttemptView{}, err
	}
	a, err := r.cfg.Store.GetAttempt(ctx, idem.GetAttemptParams{Scope: p.Scope(), Key: key})
	if err != nil {
		return idem.AttemptView{}, storeFailure(ctx, err)
	}
	v := idem.AttemptView{Key: a.Key, Operation: a.Operation, State: a.State, Fingerprint: a.Fingerprint, ExecutionID: a.ExecutionID, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt}
	if a.Status != 0 {
		v.Status = &a.Status
	}
	if !a.CompletedAt.IsZero() {
		v.CompletedAt = &a.CompletedAt
	}
	if a.SealedKeyID != "" {
		v.SecretExpiresAt = &a.SecretExpiresAt
	}
	return v, nil
}

// ListExecutions returns recent executions p may see, newest first, without
// their events: every execution of the org for an approver, its own for
// anyone else (the rule of GetExecution).
func (r *Runner) ListExecutions(ctx context.Context, p idem.Principal, params idem.ListExecutionsParams) ([]idem.Execution, error) {
	params.Org = p.Org
	fctx, cancel := context.WithTimeout(ctx, flushWait)
	_ = r.Flush(fctx) // fresh reads answered so far are listed
	cancel()
	if canonical.CheckString(params.Principal) != nil || canonical.CheckString(params.Operation) != nil {
		return []idem.Execution{}, nil // no stored execution matches such a filter
	}
	if !p.HasRole(idem.RoleApprover) {
		if params.Principal != "" && params.Principal != p.ID {
			return []idem.Execution{}, nil
		}
		params.Principal = p.ID
	}
	list, err := r.cfg.Store.ListExecutions(ctx, params)
	if err != nil {
		return nil, storeFailure(ctx, err)
	}
	return list, nil
}
