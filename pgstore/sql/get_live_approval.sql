-- RequestApproval: the newest approval of an intent that may still be
-- live, under the intent's lock (scanApproval's columns). $1 org, $2
-- requested by, $3 operation, $4 fingerprint, $5 now.
SELECT org, id, requested_by, operation, fingerprint, input, reason, status, decided_by,
    decision_reason, created_at, expires_at, decided_at, consumed_at, execution_id, rule, approver_role
FROM idem_approvals
WHERE org = $1 AND requested_by = $2 AND operation = $3 AND fingerprint = $4
    AND status IN ('pending', 'approved', 'rejected') AND expires_at > $5
ORDER BY created_at DESC, seq DESC
LIMIT 1
