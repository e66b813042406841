-- GetExecution: an execution, without its events (scanExecution's
-- columns). $1 org, $2 execution id.
SELECT org, id, principal, operation, fingerprint, key, attempts, outcome, code,
    reinvocation_of, started_at, finished_at
FROM idem_executions
WHERE org = $1 AND id = $2
