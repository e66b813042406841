package idem

import (
	"encoding/json"
	"time"
)

// ApprovalStatus is the state of an approval (SPEC §8).
type ApprovalStatus string

// The approval states.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalRejected ApprovalStatus = "rejected"
	ApprovalConsumed ApprovalStatus = "consumed"
	ApprovalExpired  ApprovalStatus = "expired"
)

// DefaultApprovalExpiry is how long an approval request stays decidable and
// an approved one stays usable.
const DefaultApprovalExpiry = 15 * time.Minute

// Approval binds an operation, the requesting principal and the input
// fingerprint. Its JSON form is the wire form of SPEC §8.
type Approval struct {
	ID             string          `json:"id"`
	Org            string          `json:"-"`
	Operation      string          `json:"operation"`
	Status         ApprovalStatus  `json:"status"`
	RequestedBy    string          `json:"requestedBy"`
	Reason         string          `json:"reason"`
	DecidedBy      *string         `json:"decidedBy"`
	DecisionReason *string         `json:"decisionReason"`
	Fingerprint    string          `json:"fingerprint"`
	Input          json.RawMessage `json:"input"`
	CreatedAt      time.Time       `json:"createdAt"`
	ExpiresAt      time.Time       `json:"expiresAt"`
	DecidedAt      *time.Time      `json:"decidedAt"`
	ConsumedAt     *time.Time      `json:"consumedAt"`
	ExecutionID    *string         `json:"executionId"`
	// Rule names the configured rule that asked for the approval (SPEC
	// §8.1); empty (and absent from the JSON) for a Go-coded policy or an
	// operation that always needs approval.
	Rule string `json:"rule,omitempty"`
	// ApproverRole is the role that may decide it; empty: RoleApprover.
	ApproverRole string `json:"-"`
}

// DecidedByRole is the role a principal must hold to decide a.
func (a Approval) DecidedByRole() string {
	if a.ApproverRole != "" {
		return a.ApproverRole
	}
	return RoleApprover
}

// Observe returns the approval as a reader at now must see it: pending or
// approved past expiresAt is expired. A rejected approval stays rejected.
func (a Approval) Observe(now time.Time) Approval {
	if (a.Status == ApprovalPending || a.Status == ApprovalApproved) && !now.Before(a.ExpiresAt) {
		a.Status = ApprovalExpired
	}
	return a
}

// Live reports whether the approval still answers for its intent at now:
// pending or approved (it may be consumed), or rejected (it refuses), and
// not past its expiry. A request for the same intent reuses a live approval
// instead of opening a new one.
func (a Approval) Live(now time.Time) bool {
	switch a.Status {
	case ApprovalPending, ApprovalApproved, ApprovalRejected:
		return now.Before(a.ExpiresAt)
	}
	return false
}

// Decision is an approver's verdict.
type Decision struct {
	Approve bool
	By      string
	Reason  string
}

// Decide applies d to a (already Observed at now) under the state rules of
// SPEC §8 and reports whether a changed. Repeating the decision the approval
// already carries leaves it unchanged, whatever its state since; another
// decision on a decided approval is APPROVAL_ALREADY_DECIDED; deciding a
// pending approval past its expiry is APPROVAL_EXPIRED. Who may decide
// (role, not the requester) is checked before, by the caller.
func (a *Approval) Decide(d Decision, now time.Time) (changed bool, err error) {
	want := ApprovalRejected
	if d.Approve {
		want = ApprovalApproved
	}
	if a.DecidedAt != nil {
		carried := ApprovalRejected
		if a.Status != ApprovalRejected {
			carried = ApprovalApproved // approved, consumed, or expired after approval
		}
		if carried == want {
			return false, nil
		}
		return false, Errorf(CodeApprovalAlreadyDecided, "approval %s is already %s", a.ID, carried).WithDetail("approvalId", a.ID)
	}
	if a.Status == ApprovalExpired {
		return false, Errorf(CodeApprovalExpired, "approval %s expired undecided at %s; the requester must send the request again", a.ID, a.ExpiresAt.UTC().Format(time.RFC3339)).WithDetail("approvalId", a.ID)
	}
	a.Status = want
	a.DecidedBy = &d.By
	if d.Reason != "" {
		a.DecisionReason = &d.Reason
	}
	t := now
	a.DecidedAt = &t
	return true, nil
}
