-- StartExecution with an approval to consume: start_execution.sql, gated
-- on consuming the approval first. "consumed" takes it only if it is
-- approved, unexpired and bound to this intent; its row lock makes
-- concurrent consumers queue, and all but the first find it consumed.
-- The execution is written only if it was consumed.
--
-- $1 to $7 as in start_execution.sql ($7: execution.started,
-- approval.consumed), $8 approval id.
--
-- Returns whether the approval was consumed and the execution's
-- reinvocation_of.
WITH consumed AS (
    UPDATE idem_approvals SET status = 'consumed', consumed_at = $6, execution_id = $5
    WHERE org = $1 AND id = $8 AND requested_by = $2 AND operation = $3 AND fingerprint = $4
        AND status = 'approved' AND expires_at > $6
    RETURNING 1),
exe AS (
    INSERT INTO idem_records (org, id, principal, operation, fingerprint, attempts, outcome, reinvocation_of,
        started_at, events)
    SELECT $1::text, $5::text, $2::text, $3::text, $4::text, 1, 'running',
        (SELECT id FROM idem_records
            WHERE org = $1 AND principal = $2 AND operation = $3 AND fingerprint = $4
            ORDER BY started_at DESC, seq DESC LIMIT 1),
        $6::timestamptz, $7::jsonb
    WHERE EXISTS (SELECT FROM consumed)
    RETURNING reinvocation_of)
SELECT EXISTS (SELECT FROM consumed), (SELECT reinvocation_of FROM exe)
