-- finish_execution.sql for more than four events (manyEvents), passed as
-- arrays.
--
-- $1 org, $2 execution id, $3 outcome, $4 code, $5 attempts, $6 now;
-- $7 to $15 the events as parallel arrays (eventArrays), in order:
-- execution ids (NULL: the finished one), types, times, attempt, codes,
-- previous error codes, attempts, durations (ms), data as JSON text.
--
-- Returns what finish_execution.sql returns.
WITH fin AS (
    UPDATE idem_executions x SET outcome = $3::text, code = $4::text, attempts = $5::int, finished_at = $6::timestamptz
    WHERE x.org = $1::text AND x.id = $2::text
    RETURNING x.id),
e AS (
    SELECT r.*, COALESCE(r.execution_id, fin.id) AS xid,
        r.execution_id IS NULL OR r.execution_id = fin.id
            OR EXISTS (SELECT FROM idem_executions k WHERE k.org = $1::text AND k.id = r.execution_id) AS known
    FROM fin, (
        SELECT n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data::jsonb
        FROM unnest($7::text[], $8::text[], $9::timestamptz[], $10::int[], $11::text[], $12::text[], $13::int[],
                $14::bigint[], $15::text[])
            WITH ORDINALITY AS u(execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, n))
        AS r(n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)),
ev AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    SELECT $1::text, xid, type, at, attempt, code, previous_error_code, attempts, duration_ms, data
    FROM e WHERE NOT EXISTS (SELECT FROM e WHERE NOT known) ORDER BY n
    RETURNING 1)
SELECT (SELECT count(*) FROM fin), (SELECT count(*) FROM ev),
    (SELECT xid FROM e WHERE NOT known ORDER BY n LIMIT 1)
