package idem

import (
	"context"
	"time"

	"github.com/idem-run/idem/canonical"
)

// The runner's system calls: approvals (SPEC §8), executions and attempt
// records (SPEC §10.1), with their visibility rules. Surfaces wrap them in
// the success envelope.

// ListApprovals returns the approvals p may see, newest first: every
// approval of the org for an approver, its own requests for anyone else.
func (r *Runner) ListApprovals(ctx context.Context, p Principal, status ApprovalStatus) ([]Approval, error) {
	params := ListApprovalsParams{Org: p.Org, Status: status}
	if !p.HasRole(RoleApprover) {
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
func (r *Runner) GetApproval(ctx context.Context, p Principal, id string) (Approval, error) {
	if canonical.CheckString(id) != nil {
		return Approval{}, approvalNotFound(id) // no store holds such an id
	}
	a, err := r.cfg.Store.GetApproval(ctx, GetApprovalParams{Org: p.Org, ID: id})
	if ErrorCode(err) == CodeApprovalNotFound {
		return Approval{}, approvalNotFound(id) // worded as one not visible
	}
	if err != nil {
		return Approval{}, storeFailure(ctx, err)
	}
	if a.RequestedBy != p.ID && !p.HasRole(RoleApprover) {
		return Approval{}, approvalNotFound(id)
	}
	return a, nil
}

// approvalNotFound answers an unknown approval and one the caller may not
// see alike, so that no answer tells them apart.
func approvalNotFound(id string) *Error {
	return Errorf(CodeApprovalNotFound, "no approval %q visible to this caller", id).WithDetail("approvalId", id)
}

// DecideApproval approves or rejects an approval, checking in the order of
// SPEC §8: unknown or another org's → APPROVAL_NOT_FOUND; no approver role
// → FORBIDDEN; the requester → SELF_APPROVAL_FORBIDDEN; then the state
// rules of Approval.Decide.
func (r *Runner) DecideApproval(ctx context.Context, p Principal, id string, approve bool, reason string) (Approval, error) {
	if err := canonical.CheckString(reason); err != nil {
		return Approval{}, invalidInput([]map[string]string{{"path": "/reason", "message": err.Error()}})
	}
	if canonical.CheckString(id) != nil {
		return Approval{}, approvalNotFound(id)
	}
	a, err := r.cfg.Store.GetApproval(ctx, GetApprovalParams{Org: p.Org, ID: id})
	if ErrorCode(err) == CodeApprovalNotFound {
		return Approval{}, approvalNotFound(id)
	}
	if err != nil {
		return Approval{}, storeFailure(ctx, err)
	}
	if !p.HasRole(RoleApprover) {
		return Approval{}, Errorf(CodeForbidden, "deciding approvals needs the %s role", RoleApprover)
	}
	if a.RequestedBy == p.ID {
		return Approval{}, Errorf(CodeSelfApprovalForbidden, "approval %s was requested by you; another approver must decide it", id).WithDetail("approvalId", id)
	}
	decided, err := r.cfg.Store.DecideApproval(ctx, DecideApprovalParams{Org: p.Org, ID: id, Decision: Decision{Approve: approve, By: p.ID, Reason: reason}})
	if err != nil {
		return Approval{}, storeFailure(ctx, err)
	}
	return decided, nil
}

// flushWait bounds how long reading an execution waits for queued replay
// events.
const flushWait = 2 * time.Second

// GetExecution returns an execution with its audit events to its own
// principal and to approvers of its org; NOT_FOUND for anyone else.
func (r *Runner) GetExecution(ctx context.Context, p Principal, id string) (Execution, error) {
	// An unknown execution and one the caller may not see answer alike.
	notFound := Errorf(CodeNotFound, "no execution %q visible to this caller", id)
	// Replay events are written off the request path: show the ones this
	// instance has answered so far.
	fctx, cancel := context.WithTimeout(ctx, flushWait)
	_ = r.Flush(fctx)
	cancel()
	if canonical.CheckString(id) != nil {
		return Execution{}, notFound // no store holds such an id
	}
	x, err := r.cfg.Store.GetExecution(ctx, GetExecutionParams{Org: p.Org, ID: id})
	if ErrorCode(err) == CodeNotFound {
		return Execution{}, notFound
	}
	if err != nil {
		return Execution{}, storeFailure(ctx, err)
	}
	if x.Principal != p.ID && !p.HasRole(RoleApprover) {
		return Execution{}, notFound
	}
	return x, nil
}

// AttemptView is the wire form of an attempt record (SPEC §10.1).
type AttemptView struct {
	Key             string       `json:"key"`
	Operation       string       `json:"operation"`
	State           AttemptState `json:"state"`
	Fingerprint     string       `json:"fingerprint"`
	ExecutionID     string       `json:"executionId"`
	Status          *int         `json:"status"`
	CreatedAt       time.Time    `json:"createdAt"`
	CompletedAt     *time.Time   `json:"completedAt"`
	ExpiresAt       time.Time    `json:"expiresAt"`
	SecretExpiresAt *time.Time   `json:"secretExpiresAt,omitempty"`
}

// GetAttempt returns the caller's own attempt record for key.
func (r *Runner) GetAttempt(ctx context.Context, p Principal, key string) (AttemptView, error) {
	if err := ValidateKey(key); err != nil {
		return AttemptView{}, err
	}
	a, err := r.cfg.Store.GetAttempt(ctx, GetAttemptParams{Scope: p.Scope(), Key: key})
	if err != nil {
		return AttemptView{}, storeFailure(ctx, err)
	}
	v := AttemptView{Key: a.Key, Operation: a.Operation, State: a.State, Fingerprint: a.Fingerprint, ExecutionID: a.ExecutionID, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt}
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
func (r *Runner) ListExecutions(ctx context.Context, p Principal, params ListExecutionsParams) ([]Execution, error) {
	params.Org = p.Org
	if canonical.CheckString(params.Principal) != nil || canonical.CheckString(params.Operation) != nil {
		return []Execution{}, nil // no stored execution matches such a filter
	}
	if !p.HasRole(RoleApprover) {
		if params.Principal != "" && params.Principal != p.ID {
			return []Execution{}, nil
		}
		params.Principal = p.ID
	}
	list, err := r.cfg.Store.ListExecutions(ctx, params)
	if err != nil {
		return nil, storeFailure(ctx, err)
	}
	return list, nil
}
