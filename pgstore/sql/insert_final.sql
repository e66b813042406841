-- Transact, keyed and without an approval, at the end (transactfinal.go):
-- inserts the execution's final record, which is its finished execution
-- too, linked to the most recent earlier one of the intent, with its
-- events (execution.started and the final ones). A forgotten holder of
-- the key lets it go first ("gone"), as in reserve.sql. The transaction
-- holds the key's lock.
--
-- $1 org, $2 principal, $3 key, $4 operation, $5 fingerprint, $6
-- execution id, $7 lease expiry, $8 start, $9 retention expiry, $10
-- state, $11 status, $12 headers, $13 body, $14 sealed key id, $15 now,
-- $16 secret expiry, $17 attempts, $18 outcome, $19 code, $20 the events
-- (a JSON array, storedEvent's form), $21 the fingerprint's version (as
-- in reserve.sql).
--
-- Returns the record's fencing token; the caller knows the rest of the
-- record (it wrote it), so none of it comes back over the wire.
WITH gone AS (
    UPDATE idem_records SET held = false, headers = NULL, body = NULL
    WHERE org = $1 AND principal = $2 AND key = $3 AND held
        AND NOT (expires_at > $8 OR (state = 'in_flight' AND lease_expires_at > $8))
    RETURNING 1)
INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, completed_at, expires_at, secret_expires_at,
    attempts, outcome, code, reinvocation_of, started_at, finished_at, events, fingerprint_version)
SELECT $1::text, $6::text, $2::text, $4::text, $5::text, $3::text, true, $10::text, nextval('idem_fencing_tokens'),
    $7::timestamptz, $11::int, $12::jsonb, $13::bytea, $14::text, $15::timestamptz, $9::timestamptz, $16::timestamptz,
    $17::int, $18::text, $19::text,
    (SELECT id FROM idem_records
        WHERE org = $1 AND principal = $2 AND operation = $4 AND fingerprint = $5
        ORDER BY started_at DESC, seq DESC LIMIT 1),
    $8::timestamptz, $15::timestamptz, $20::jsonb, NULLIF($21::int2, 0)
WHERE (SELECT count(*) FROM gone) >= 0
RETURNING fencing_token
