-- RequestApproval: a new pending approval. $1 org, $2 id, $3 requested
-- by, $4 operation, $5 fingerprint, $6 input, $7 reason, $8 now, $9
-- expiry, $10 rule, $11 approver role. Returns it (scanApproval's columns).
INSERT INTO idem_approvals (org, id, requested_by, operation,
    fingerprint, input, reason, status, created_at, expires_at, rule, approver_role)
VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11)
RETURNING org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
