-- GetExecution: an execution with the events its own statements wrote
-- (scanExecution's columns, then events). $1 org, $2 execution id.
SELECT org, id, principal, operation, fingerprint, key, attempts, outcome, code,
    reinvocation_of, started_at, finished_at, events
FROM idem_records
WHERE org = $1 AND id = $2
