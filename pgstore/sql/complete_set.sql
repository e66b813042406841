-- completeSet: completes a set of records, each under its own fence, and
-- finishes their executions (the same rows), in one statement.
--
-- "u" holds the calls, one row each, numbered n, from parallel arrays:
-- $1 org, $2 principal, $3 key, $4 fencing token, $5 state, $6 status,
-- $7 headers as JSON text, $8 body, $9 sealed key id, $10 secret expiry,
-- $11 outcome, $12 code, $13 attempts, $14 NOTIFY payload, $15 the
-- execution its events name, if any, $16 its final events (a JSON array
-- as text, storedEvent's form). $17 is now.
--
-- "done" is the fenced UPDATE of every record: a call whose record is no
-- longer in flight under its token and lease matches nothing and writes
-- nothing, and neither does one whose events name another execution than
-- the record's, so that a call's failure is never its neighbours'.
-- "notified" signals the watched ones on idem_completed
-- (completedChannel). The statement returns, for each completed record,
-- its call's number, the count of notifications sent (the same on every
-- row) and the record (scanAttempt's columns).
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::int[], $7::text[],
        $8::bytea[], $9::text[], $10::timestamptz[], $11::text[], $12::text[], $13::int[], $14::text[], $15::text[],
        $16::text[])
        WITH ORDINALITY AS u(org, principal, key, token, state, status, headers, body, sealed_key_id,
            secret_expires_at, outcome, code, attempts, payload, named, events, n)),
done AS (
    UPDATE idem_records r SET
        state = u.state, status = u.status, headers = u.headers::jsonb, body = u.body,
        sealed_key_id = u.sealed_key_id, completed_at = $17, secret_expires_at = u.secret_expires_at,
        outcome = u.outcome, code = u.code, attempts = u.attempts, finished_at = $17,
        events = r.events || u.events::jsonb
    FROM u
    WHERE r.org = u.org AND r.principal = u.principal AND r.key = u.key AND r.held AND r.fencing_token = u.token
        AND r.state = 'in_flight' AND r.lease_expires_at > $17::timestamptz
        AND (u.named IS NULL OR u.named = r.id)
    RETURNING u.n, u.payload, r.watched,
        r.org, r.principal, r.key, r.operation, r.fingerprint, r.state, r.id, r.fencing_token,
        r.lease_expires_at, r.status, r.headers, r.body, r.sealed_key_id, r.started_at, r.completed_at,
        r.expires_at, r.secret_expires_at, r.attempts, r.fingerprint_version),
notified AS (SELECT pg_notify('idem_completed', payload) FROM done WHERE watched)
SELECT n, (SELECT count(*) FROM notified),
    org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
FROM done
