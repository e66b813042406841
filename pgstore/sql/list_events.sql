-- GetExecution: the events appended to an execution (AppendEvents), in
-- order, each with how many of the record's own events precede it
-- (scanEvent's columns). $1 org, $2 execution id.
SELECT pos, type, at, COALESCE(attempt, 0), COALESCE(code, ''),
    COALESCE(previous_error_code, ''), COALESCE(attempts, 0), COALESCE(duration_ms, 0), data
FROM idem_audit_events
WHERE org = $1 AND execution_id = $2
ORDER BY id
