-- Complete, alone (completeOne, or a batch of one), with up to four final
-- events (manyEvents; beyond, complete_attempt_many_events.sql): the
-- fenced update of the record ("done"), then, only if it matched, the
-- finish of its execution as in finish_execution.sql ("fin", by primary
-- key through the record's execution_id: written as a join on "done", the
-- planner scanned the org's executions; "e", "ev") and, when the record is
-- watched, the NOTIFY of the key on idem_completed (completedChannel) at
-- commit ("notified", which runs because the final SELECT reads it).
-- Fenced (wrong token, not in flight, or the lease passed), "done" is
-- empty and nothing is written.
--
-- $1 org, $2 principal, $3 key, $4 fencing token, $5 state, $6 status,
-- $7 headers, $8 body, $9 sealed key id, $10 now, $11 secret expiry;
-- $12 outcome, $13 code, $14 attempts (the execution's finish); $15 the
-- NOTIFY payload (notifyPayload); $16 the number of events, n; then four
-- slots of nine parameters, one event each, the first n used and the rest
-- NULL: execution id (NULL: the record's), type, at, attempt, code,
-- previous error code, attempts, duration (ms), data.
--
-- Returns, if the fence held, one row: what finish_execution.sql returns,
-- the number of notifications, then the record (scanAttempt's columns).
WITH done AS (
    UPDATE idem_attempts SET
        state = $5, status = $6, headers = $7, body = $8, sealed_key_id = $9,
        completed_at = $10, secret_expires_at = $11
    WHERE org = $1 AND principal = $2 AND key = $3 AND fencing_token = $4
        AND state = 'in_flight' AND lease_expires_at > $10
    RETURNING watched, org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at),
fin AS (
    UPDATE idem_executions x SET outcome = $12::text, code = $13::text, attempts = $14::int, finished_at = $10::timestamptz
    WHERE x.org = $1::text AND x.id = (SELECT execution_id FROM done)
    RETURNING x.id),
e AS (
    SELECT r.*, COALESCE(r.execution_id, fin.id) AS xid,
        r.execution_id IS NULL OR r.execution_id = fin.id
            OR EXISTS (SELECT FROM idem_executions k WHERE k.org = $1::text AND k.id = r.execution_id) AS known
    FROM fin, (VALUES
        (1, $17::text, $18::text, $19::timestamptz, $20::int, $21::text, $22::text, $23::int, $24::bigint, $25::jsonb),
        (2, $26::text, $27::text, $28::timestamptz, $29::int, $30::text, $31::text, $32::int, $33::bigint, $34::jsonb),
        (3, $35::text, $36::text, $37::timestamptz, $38::int, $39::text, $40::text, $41::int, $42::bigint, $43::jsonb),
        (4, $44::text, $45::text, $46::timestamptz, $47::int, $48::text, $49::text, $50::int, $51::bigint, $52::jsonb))
        AS r(n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)
    WHERE r.n <= $16::int),
ev AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    SELECT $1::text, xid, type, at, attempt, code, previous_error_code, attempts, duration_ms, data
    FROM e WHERE NOT EXISTS (SELECT FROM e WHERE NOT known) ORDER BY n
    RETURNING 1),
notified AS (SELECT pg_notify('idem_completed', $15::text) FROM done WHERE watched)
SELECT (SELECT count(*) FROM fin), (SELECT count(*) FROM ev),
    (SELECT xid FROM e WHERE NOT known ORDER BY n LIMIT 1), (SELECT count(*) FROM notified),
    org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM done
