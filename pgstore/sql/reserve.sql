-- Reserve: runs under the key's advisory lock (key_lock.sql), sent in the
-- same round trip. It returns the record holding the key if it is within
-- retention, or in flight within its lease ("live"; reserved false);
-- otherwise it makes a forgotten holder let the key go ("gone": its
-- result goes, its execution stays for the audit) and inserts the new
-- record, which is its execution too ("made"; reserved true), linked to
-- the most recent earlier execution of the same intent, with its
-- execution.started event. "made" reads "gone" so that the update runs
-- first: the new row then takes the key in the unique index the old one
-- left. All CTEs share one snapshot, so each reads the previous one's
-- RETURNING, never the table.
--
-- With $10 (try) the transaction only tried the key's lock (Transact):
-- "locked" tries it again, and without it the statement writes nothing,
-- so that it never waits for the holder's rows.
--
-- $1 org, $2 principal, $3 key, $4 operation, $5 fingerprint, $6
-- execution id, $7 lease expiry, $8 now, $9 retention expiry, $10 try,
-- $11 the key lock's seed (keyLockSeed), $12 the execution's events (a
-- JSON array: execution.started), $13 the version of the fingerprint's
-- preimage (StartParams.FingerprintVersion; 0 is stored as NULL, a record
-- made before versions were stored).
--
-- Returns one row: reserved, whether the approval was consumed (true:
-- see reserve_with_approval.sql), the new execution's reinvocation_of,
-- then the record (scanAttempt's columns). No row when try found the lock
-- taken and no live record.
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
        lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version)
SELECT true, true, reinvocation_of,
    org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
FROM made
UNION ALL
SELECT false, true, NULL,
    org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
FROM live
