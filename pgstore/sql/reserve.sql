-- Reserve: runs under the key's advisory lock (key_lock.sql), sent in the
-- same round trip. It returns the newest record of the key if it is
-- within retention, or in flight within its lease ("live"; reserved
-- false); otherwise it deletes the key's forgotten rows ("gone"), inserts
-- the new record ("made"; reserved true) and starts its execution ("exe",
-- linked to the most recent earlier execution of the same intent, and its
-- execution.started event, idem.EventStarted, in "started"). "made" reads
-- "gone" so that the delete runs first: a new row may then reuse the
-- primary key of the one it replaces. All CTEs share one snapshot, so
-- each reads the previous one's RETURNING, never the table.
--
-- With $10 (try) the transaction only tried the key's lock (Transact):
-- "locked" tries it again, and without it the statement writes nothing,
-- so that it never waits for the holder's rows.
--
-- $1 org, $2 principal, $3 key, $4 operation, $5 fingerprint, $6
-- execution id, $7 lease expiry, $8 now, $9 retention expiry, $10 try,
-- $11 the key lock's seed (keyLockSeed).
--
-- Returns one row: reserved, whether the approval was consumed (true:
-- see reserve_with_approval.sql), the new execution's reinvocation_of,
-- then the record (scanAttempt's columns). No row when try found the lock
-- taken and no live record.
WITH locked AS MATERIALIZED (
    SELECT CASE WHEN $10::bool
        THEN pg_try_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, $11::int8))
        ELSE true END AS held),
live AS (
    SELECT org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
    FROM (
        SELECT org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
            lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
        FROM idem_attempts
        WHERE org = $1 AND principal = $2 AND key = $3
        ORDER BY created_at DESC LIMIT 1) newest
    WHERE expires_at > $8 OR (state = 'in_flight' AND lease_expires_at > $8)),
gone AS (
    DELETE FROM idem_attempts
    WHERE org = $1 AND principal = $2 AND key = $3 AND expires_at <= $8
        AND NOT (state = 'in_flight' AND lease_expires_at > $8)
        AND NOT EXISTS (SELECT FROM live) AND (SELECT held FROM locked)
    RETURNING 1),
made AS (
    INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state,
        execution_id, fencing_token, lease_expires_at, created_at, expires_at)
    SELECT $1, $2, $3, $4::text, $5::text, 'in_flight', $6::text, nextval('idem_fencing_tokens'),
        $7::timestamptz, $8, $9::timestamptz
    WHERE NOT EXISTS (SELECT FROM live) AND (SELECT held FROM locked) AND (SELECT count(*) FROM gone) >= 0
    RETURNING org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at),
exe AS (
    INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
        attempts, outcome, reinvocation_of, started_at)
    SELECT $1::text, $6::text, $2::text, $4::text, $5::text, $3::text, 1, 'running',
        (SELECT id FROM idem_executions
            WHERE org = $1::text AND principal = $2::text AND operation = $4::text AND fingerprint = $5::text
            ORDER BY started_at DESC, seq DESC LIMIT 1),
        $8::timestamptz
    WHERE EXISTS (SELECT FROM made)
    RETURNING reinvocation_of),
started AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, data)
    SELECT $1::text, $6::text, e.type, $8::timestamptz, e.attempt, e.data
    FROM exe, (VALUES (1, 'execution.started'::text, 1::int, NULL::jsonb)) AS e(n, type, attempt, data)
    ORDER BY e.n
    RETURNING 1)
SELECT true, true, (SELECT reinvocation_of FROM exe),
    org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM made
UNION ALL
SELECT false, true, NULL,
    org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM live
