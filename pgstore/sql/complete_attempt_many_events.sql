-- complete_attempt.sql for more than four final events (manyEvents),
-- passed as arrays.
--
-- $1 to $15 as in complete_attempt.sql; $16 to $24 the events as parallel
-- arrays (eventArrays), in order: execution ids (NULL: the record's),
-- types, times, attempt, codes, previous error codes, attempts, durations
-- (ms), data as JSON text.
--
-- Returns what complete_attempt.sql returns.
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
    FROM fin, (
        SELECT n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data::jsonb
        FROM unnest($16::text[], $17::text[], $18::timestamptz[], $19::int[], $20::text[], $21::text[], $22::int[],
                $23::bigint[], $24::text[])
            WITH ORDINALITY AS u(execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, n))
        AS r(n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)),
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
