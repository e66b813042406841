-- StartExecution with an approval to consume: start_execution.sql, gated
-- on consuming the approval first. "consumed" takes it only if it is
-- approved, unexpired and bound to this intent; its row lock makes
-- concurrent consumers queue, and all but the first find it consumed.
-- The execution and its events (execution.started, then
-- approval.consumed: idem.EventStarted, idem.EventApprovalConsumed) are
-- written only if it was consumed.
--
-- $1 org, $2 principal, $3 operation, $4 fingerprint, $5 execution id,
-- $6 now, $7 approval id.
--
-- Returns whether the approval was consumed and the execution's
-- reinvocation_of.
WITH consumed AS (
    UPDATE idem_approvals SET status = 'consumed', consumed_at = $6::timestamptz, execution_id = $5::text
    WHERE org = $1::text AND id = $7::text AND requested_by = $2::text AND operation = $3::text AND fingerprint = $4::text
        AND status = 'approved' AND expires_at > $6::timestamptz
    RETURNING 1),
exe AS (
    INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
        attempts, outcome, reinvocation_of, started_at)
    SELECT $1::text, $5::text, $2::text, $3::text, $4::text, NULL::text, 1, 'running',
        (SELECT id FROM idem_executions
            WHERE org = $1::text AND principal = $2::text AND operation = $3::text AND fingerprint = $4::text
            ORDER BY started_at DESC, seq DESC LIMIT 1),
        $6::timestamptz
    WHERE EXISTS (SELECT FROM consumed)
    RETURNING reinvocation_of),
started AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, data)
    SELECT $1::text, $5::text, e.type, $6::timestamptz, e.attempt, e.data
    FROM exe, (VALUES
        (1, 'execution.started'::text, 1::int, NULL::jsonb),
        (2, 'approval.consumed', NULL, jsonb_build_object('approvalId', $7::text))) AS e(n, type, attempt, data)
    ORDER BY e.n
    RETURNING 1)
SELECT EXISTS (SELECT FROM consumed), (SELECT reinvocation_of FROM exe)
