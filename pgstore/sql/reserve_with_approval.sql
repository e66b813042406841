-- Reserve with an approval to consume: reserve.sql, and, when it
-- reserves, "consumed" takes the approval only if it is approved,
-- unexpired and bound to this intent (its row lock makes concurrent
-- consumers queue, and all but the first find it consumed). Like every
-- write here it is gated on "made", so that without the key's lock it
-- takes no row lock. When the approval is not consumed, the record was
-- inserted anyway and the caller rolls the transaction back.
--
-- $1 to $11 as in reserve.sql, $12 the execution's events (a JSON array:
-- execution.started, approval.consumed), $14 approval id.
--
-- Returns what reserve.sql returns, with consumed false when the record
-- was inserted but the approval not consumable.
WITH locked AS MATERIALIZED (
    SELECT CASE WHEN $10::bool
        THEN pg_try_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, $11::int8))
        ELSE true END AS got),
live AS (
    SELECT org, principal, key, operation, fingerprint, state, id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
    FROM idem_records
    WHERE org = $1 AND principal = $2 AND key = $3 AND held
        AND (expires_at > $8 OR (state = 'in_flight' AND lease_expires_at > $8))),
gone AS (
    UPDATE idem_records SET held = false, headers = NULL, body = NULL
    WHERE org = $1 AND principal = $2 AND key = $3 AND held
        AND NOT (expires_at > $8 OR (state = 'in_flight' AND lease_expires_at > $8))
        AND (SELECT got FROM locked)
    RETURNING 1),
made AS (
    INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state, fencing_token,
        lease_expires_at, expires_at, attempts, outcome, reinvocation_of, started_at, events, fingerprint_version)
    SELECT $1::text, $6::text, $2::text, $4::text, $5::text, $3::text, true, 'in_flight', nextval('idem_fencing_tokens'),
        $7::timestamptz, $9::timestamptz, 1, 'running',
        (SELECT id FROM idem_records
            WHERE org = $1 AND principal = $2 AND operation = $4 AND fingerprint = $5
            ORDER BY started_at DESC, seq DESC LIMIT 1),
        $8::timestamptz, $12::jsonb, NULLIF($13::int2, 0)
    WHERE NOT EXISTS (SELECT FROM live) AND (SELECT got FROM locked) AND (SELECT count(*) FROM gone) >= 0
    RETURNING reinvocation_of, org, principal, key, operation, fingerprint, state, id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version),
consumed AS (
    UPDATE idem_approvals SET status = 'consumed', consumed_at = $8, execution_id = $6
    WHERE org = $1 AND id = $14 AND requested_by = $2 AND operation = $4 AND fingerprint = $5
        AND status = 'approved' AND expires_at > $8 AND EXISTS (SELECT FROM made)
    RETURNING 1)
SELECT true, EXISTS (SELECT FROM consumed), reinvocation_of,
    org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
FROM made
UNION ALL
SELECT false, true, NULL,
    org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
FROM live
