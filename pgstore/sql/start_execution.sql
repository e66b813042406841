-- StartExecution without an approval: inserts the unkeyed execution,
-- linked (reinvocation_of) to the most recent earlier execution of the
-- same intent, and its execution.started event (idem.EventStarted).
--
-- $1 org, $2 principal, $3 operation, $4 fingerprint, $5 execution id,
-- $6 now.
--
-- Returns true (there is no approval to consume, see
-- start_execution_with_approval.sql) and the execution's reinvocation_of.
WITH exe AS (
    INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
        attempts, outcome, reinvocation_of, started_at)
    SELECT $1::text, $5::text, $2::text, $3::text, $4::text, NULL::text, 1, 'running',
        (SELECT id FROM idem_executions
            WHERE org = $1::text AND principal = $2::text AND operation = $3::text AND fingerprint = $4::text
            ORDER BY started_at DESC, seq DESC LIMIT 1),
        $6::timestamptz
    RETURNING reinvocation_of),
started AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, data)
    SELECT $1::text, $5::text, e.type, $6::timestamptz, e.attempt, e.data
    FROM exe, (VALUES (1, 'execution.started'::text, 1::int, NULL::jsonb)) AS e(n, type, attempt, data)
    ORDER BY e.n
    RETURNING 1)
SELECT true, (SELECT reinvocation_of FROM exe)
