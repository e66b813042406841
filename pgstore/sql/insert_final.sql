-- Transact, keyed and without an approval, at the end (transactfinal.go):
-- inserts the execution's final record, its finished execution (linked
-- to the most recent earlier one of the intent) and its events:
-- execution.started (idem.EventStarted) at the start, then one to four
-- more (manyEvents; canInsertFinal). The key's forgotten rows go first, as
-- in reserve.sql. The transaction holds the key's lock.
--
-- $1 org, $2 principal, $3 key, $4 operation, $5 fingerprint, $6
-- execution id, $7 lease expiry, $8 start, $9 retention expiry, $10
-- state, $11 status, $12 headers, $13 body, $14 sealed key id, $15 now,
-- $16 secret expiry, $17 attempts, $18 outcome, $19 code; $20 the number
-- of events, n; then four slots of nine parameters, one event each, the
-- first n used and the rest NULL: execution id (unused: the events are
-- the execution's own), type, at, attempt, code, previous error code,
-- attempts, duration (ms), data.
--
-- Returns the number of events inserted (n + 1), then the record
-- (scanAttempt's columns).
WITH gone AS (
    DELETE FROM idem_attempts
    WHERE org = $1 AND principal = $2 AND key = $3 AND expires_at <= $8
        AND NOT (state = 'in_flight' AND lease_expires_at > $8)
    RETURNING 1),
made AS (
    INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at)
    SELECT $1, $2, $3, $4::text, $5::text, $10::text, $6::text, nextval('idem_fencing_tokens'),
        $7::timestamptz, $11::int, $12::jsonb, $13::bytea, $14::text, $8::timestamptz, $15::timestamptz, $9::timestamptz,
        $16::timestamptz
    WHERE (SELECT count(*) FROM gone) >= 0
    RETURNING org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at),
exe AS (
    INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
        attempts, outcome, code, reinvocation_of, started_at, finished_at)
    SELECT $1::text, $6::text, $2::text, $4::text, $5::text, $3::text, $17::int, $18::text, $19::text,
        (SELECT id FROM idem_executions
            WHERE org = $1::text AND principal = $2::text AND operation = $4::text AND fingerprint = $5::text
            ORDER BY started_at DESC, seq DESC LIMIT 1),
        $8::timestamptz, $15::timestamptz
    FROM made
    RETURNING id),
ev AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    SELECT $1::text, exe.id, r.type, r.at, r.attempt, r.code, r.previous_error_code, r.attempts, r.duration_ms, r.data
    FROM exe, (VALUES
        (0, NULL::text, 'execution.started'::text, $8::timestamptz, 1::int, NULL::text, NULL::text, NULL::int, NULL::bigint, NULL::jsonb),
        (1, $21::text, $22::text, $23::timestamptz, $24::int, $25::text, $26::text, $27::int, $28::bigint, $29::jsonb),
        (2, $30::text, $31::text, $32::timestamptz, $33::int, $34::text, $35::text, $36::int, $37::bigint, $38::jsonb),
        (3, $39::text, $40::text, $41::timestamptz, $42::int, $43::text, $44::text, $45::int, $46::bigint, $47::jsonb),
        (4, $48::text, $49::text, $50::timestamptz, $51::int, $52::text, $53::text, $54::int, $55::bigint, $56::jsonb))
        AS r(n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)
    WHERE r.n <= $20::int
    ORDER BY r.n
    RETURNING 1)
SELECT (SELECT count(*) FROM ev),
    org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM made
