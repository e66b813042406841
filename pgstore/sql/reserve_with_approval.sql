-- Reserve with an approval to consume: reserve.sql, whose execution
-- starts only once the approval is consumed, in the same statement. When
-- it reserves, "consumed" takes the approval only if it is approved,
-- unexpired and bound to this intent (its row lock makes concurrent
-- consumers queue, and all but the first find it consumed); the execution
-- and its events (execution.started, then approval.consumed:
-- idem.EventStarted, idem.EventApprovalConsumed) are written only if it
-- was consumed. Like every write here it is gated on "made", so that
-- without the key's lock it takes no row lock.
--
-- $1 org, $2 principal, $3 key, $4 operation, $5 fingerprint, $6
-- execution id, $7 lease expiry, $8 now, $9 retention expiry, $10 try,
-- $11 keyLockSeed (see reserve.sql), $12 approval id.
--
-- Returns what reserve.sql returns, with consumed false when the record
-- was inserted but the approval not consumable (the caller rolls back).
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
consumed AS (
    UPDATE idem_approvals SET status = 'consumed', consumed_at = $8::timestamptz, execution_id = $6::text
    WHERE org = $1::text AND id = $12::text AND requested_by = $2::text AND operation = $4::text AND fingerprint = $5::text
        AND status = 'approved' AND expires_at > $8::timestamptz AND EXISTS (SELECT FROM made)
    RETURNING 1),
exe AS (
    INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
        attempts, outcome, reinvocation_of, started_at)
    SELECT $1::text, $6::text, $2::text, $4::text, $5::text, $3::text, 1, 'running',
        (SELECT id FROM idem_executions
            WHERE org = $1::text AND principal = $2::text AND operation = $4::text AND fingerprint = $5::text
            ORDER BY started_at DESC, seq DESC LIMIT 1),
        $8::timestamptz
    WHERE EXISTS (SELECT FROM made) AND EXISTS (SELECT FROM consumed)
    RETURNING reinvocation_of),
started AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, data)
    SELECT $1::text, $6::text, e.type, $8::timestamptz, e.attempt, e.data
    FROM exe, (VALUES
        (1, 'execution.started'::text, 1::int, NULL::jsonb),
        (2, 'approval.consumed', NULL, jsonb_build_object('approvalId', $12::text))) AS e(n, type, attempt, data)
    ORDER BY e.n
    RETURNING 1)
SELECT true, EXISTS (SELECT FROM consumed), (SELECT reinvocation_of FROM exe),
    org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM made
UNION ALL
SELECT false, true, NULL,
    org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM live
