-- Complete, alone (completeOne, or a batch of one): the fenced update of
-- the record, which is its execution too ("done": the result, the
-- execution's finish and its own final events appended to "events"),
-- and, when the record is watched, the NOTIFY of the key on
-- idem_completed (completedChannel) at commit ("notified", which runs
-- because the final SELECT reads it). Fenced (wrong token, not in
-- flight, or the lease passed), "done" is empty and nothing is written.
--
-- $1 org, $2 principal, $3 key, $4 fencing token, $5 state, $6 status,
-- $7 headers, $8 body, $9 sealed key id, $10 now, $11 secret expiry;
-- $12 outcome, $13 code, $14 attempts (the execution's finish); $15 the
-- NOTIFY payload (notifyPayload); $16 the final events (a JSON array,
-- storedEvent's form), appended only if the record's execution is $17 or
-- $17 is empty (the execution the events name; when it is another, the
-- caller appends them where they say).
--
-- Returns, if the fence held, one row: the number of notifications, then
-- the record (scanAttempt's columns).
WITH done AS (
    UPDATE idem_records SET
        state = $5, status = $6, headers = $7, body = $8, sealed_key_id = $9,
        completed_at = $10, secret_expires_at = $11,
        outcome = $12, code = $13, attempts = $14, finished_at = $10,
        events = events || CASE WHEN $17::text = '' OR id = $17::text THEN $16::jsonb ELSE '[]'::jsonb END
    WHERE org = $1 AND principal = $2 AND key = $3 AND held AND fencing_token = $4
        AND state = 'in_flight' AND lease_expires_at > $10
    RETURNING watched, org, principal, key, operation, fingerprint, state, id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version),
notified AS (SELECT pg_notify('idem_completed', $15::text) FROM done WHERE watched)
SELECT (SELECT count(*) FROM notified),
    org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
FROM done
