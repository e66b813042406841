-- RecordExecutions: inserts finished executions (fresh reads, after their
-- answer), one row each with its events, in one statement. "x" holds them
-- from parallel arrays, numbered n in their order: $1 org, $2 execution
-- id, $3 principal, $4 operation, $5 fingerprint, $6 attempts, $7
-- outcome, $8 code, $9 started at, $10 finished at, $11 events (a JSON
-- array as text, storedEvent's form), $12 the execution it re-invokes
-- when that is an earlier one of the same call (NULL: the most recent
-- stored one of its intent, looked up here). An id that exists fails the
-- statement, and nothing is written.
INSERT INTO idem_records (org, id, principal, operation, fingerprint, attempts, outcome, code, reinvocation_of,
    started_at, finished_at, events)
SELECT x.org, x.id, x.principal, x.operation, x.fingerprint, x.attempts, x.outcome, x.code,
    COALESCE(x.previous, (SELECT r.id FROM idem_records r
        WHERE r.org = x.org AND r.principal = x.principal AND r.operation = x.operation AND r.fingerprint = x.fingerprint
        ORDER BY r.started_at DESC, r.seq DESC LIMIT 1)),
    x.started_at, x.finished_at, x.events::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[],
        $9::timestamptz[], $10::timestamptz[], $11::text[], $12::text[])
    WITH ORDINALITY AS x(org, id, principal, operation, fingerprint, attempts, outcome, code, started_at, finished_at,
        events, previous, n)
ORDER BY x.n
