-- ListApprovals: an org's approvals, newest first, filtered by status as
-- observed now (a pending or approved one past its expiry is expired), in
-- SQL, so that LIMIT counts only matching rows (scanApproval's columns).
-- Every section takes $1 org and $2 requested by (every requester when
-- empty) and ends with the limit.

-- name: all
-- Any status. $3 limit.
SELECT org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
FROM idem_approvals
WHERE org = $1 AND seq > 0 AND ($2 = '' OR requested_by = $2)
ORDER BY created_at DESC, seq DESC
LIMIT $3

-- name: live
-- Pending or approved, unexpired. $3 status, $4 now, $5 limit.
SELECT org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
FROM idem_approvals
WHERE org = $1 AND seq > 0 AND ($2 = '' OR requested_by = $2) AND status = $3 AND expires_at > $4
ORDER BY created_at DESC, seq DESC
LIMIT $5

-- name: expired
-- Expired, marked or not. $3 now, $4 limit.
SELECT org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
FROM idem_approvals
WHERE org = $1 AND seq > 0 AND ($2 = '' OR requested_by = $2)
    AND (status = 'expired' OR status IN ('pending', 'approved') AND expires_at <= $3)
ORDER BY created_at DESC, seq DESC
LIMIT $4

-- name: status
-- Any other status (rejected, consumed). $3 status, $4 limit.
SELECT org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
FROM idem_approvals
WHERE org = $1 AND seq > 0 AND ($2 = '' OR requested_by = $2) AND status = $3
ORDER BY created_at DESC, seq DESC
LIMIT $4
