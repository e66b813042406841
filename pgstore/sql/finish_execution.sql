-- FinishExecution (and Release, and an unkeyed transactional execution)
-- with up to four events (manyEvents; beyond,
-- finish_execution_many_events.sql): records the execution's outcome
-- ("fin"), then appends its events, all or none ("ev"). Each event names
-- its execution or, when NULL, the finished one, which must exist in the
-- org; "e" marks the events whose execution does not ("known" false), and
-- then none is appended.
--
-- $1 org, $2 execution id, $3 outcome, $4 code, $5 attempts, $6 now;
-- $7 the number of events, n; then four slots of nine parameters, one
-- event each, the first n used and the rest NULL: execution id, type, at,
-- attempt, code, previous error code, attempts, duration (ms), data.
--
-- Returns how many executions were finished (0 or 1), how many events
-- appended, and the first unknown execution an event named (NULL if none).
WITH fin AS (
    UPDATE idem_executions x SET outcome = $3::text, code = $4::text, attempts = $5::int, finished_at = $6::timestamptz
    WHERE x.org = $1::text AND x.id = $2::text
    RETURNING x.id),
e AS (
    SELECT r.*, COALESCE(r.execution_id, fin.id) AS xid,
        r.execution_id IS NULL OR r.execution_id = fin.id
            OR EXISTS (SELECT FROM idem_executions k WHERE k.org = $1::text AND k.id = r.execution_id) AS known
    FROM fin, (VALUES
        (1, $8::text, $9::text, $10::timestamptz, $11::int, $12::text, $13::text, $14::int, $15::bigint, $16::jsonb),
        (2, $17::text, $18::text, $19::timestamptz, $20::int, $21::text, $22::text, $23::int, $24::bigint, $25::jsonb),
        (3, $26::text, $27::text, $28::timestamptz, $29::int, $30::text, $31::text, $32::int, $33::bigint, $34::jsonb),
        (4, $35::text, $36::text, $37::timestamptz, $38::int, $39::text, $40::text, $41::int, $42::bigint, $43::jsonb))
        AS r(n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)
    WHERE r.n <= $7::int),
ev AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    SELECT $1::text, xid, type, at, attempt, code, previous_error_code, attempts, duration_ms, data
    FROM e WHERE NOT EXISTS (SELECT FROM e WHERE NOT known) ORDER BY n
    RETURNING 1)
SELECT (SELECT count(*) FROM fin), (SELECT count(*) FROM ev),
    (SELECT xid FROM e WHERE NOT known ORDER BY n LIMIT 1)
