-- DecideApproval: writes a decision back, under the row lock of
-- get_approval.sql's for_update. $1 org, $2 id, $3 status, $4 decided by,
-- $5 decision reason, $6 decided at.
UPDATE idem_approvals SET status = $3, decided_by = $4, decision_reason = $5, decided_at = $6
WHERE org = $1 AND id = $2
