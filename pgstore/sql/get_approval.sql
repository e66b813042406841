-- GetApproval and DecideApproval: one approval of an org (scanApproval's
-- columns). $1 org, $2 id.

-- name: read
SELECT org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
FROM idem_approvals
WHERE org = $1 AND id = $2

-- name: for_update
-- DecideApproval: the same, locking the row until the decision commits.
SELECT org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
FROM idem_approvals
WHERE org = $1 AND id = $2
FOR UPDATE
