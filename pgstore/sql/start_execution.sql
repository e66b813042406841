-- StartExecution without an approval: inserts the unkeyed execution,
-- linked (reinvocation_of) to the most recent earlier execution of the
-- same intent, with its events.
--
-- $1 org, $2 principal, $3 operation, $4 fingerprint, $5 execution id,
-- $6 now, $7 the execution's events (a JSON array: execution.started).
--
-- Returns true (there is no approval to consume, see
-- start_execution_with_approval.sql) and the execution's reinvocation_of.
INSERT INTO idem_records (org, id, principal, operation, fingerprint, attempts, outcome, reinvocation_of,
    started_at, events)
SELECT $1::text, $5::text, $2::text, $3::text, $4::text, 1, 'running',
    (SELECT id FROM idem_records
        WHERE org = $1 AND principal = $2 AND operation = $3 AND fingerprint = $4
        ORDER BY started_at DESC, seq DESC LIMIT 1),
    $6::timestamptz, $7::jsonb
RETURNING true, reinvocation_of
