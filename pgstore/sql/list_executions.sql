-- ListExecutions: an org's executions, newest first, without events
-- (scanExecution's columns). $1 org; $2 principal, $3 operation and $4
-- outcome filter unless empty; $5 limit. "seq > 0", always true, is the
-- predicate of idem_records_recent, which only this statement names
-- (migration 010).
SELECT org, id, principal, operation, fingerprint, key, attempts, outcome, code,
    reinvocation_of, started_at, finished_at
FROM idem_records
WHERE org = $1 AND seq > 0 AND ($2 = '' OR principal = $2) AND ($3 = '' OR operation = $3) AND ($4 = '' OR outcome = $4)
ORDER BY started_at DESC, seq DESC
LIMIT $5
