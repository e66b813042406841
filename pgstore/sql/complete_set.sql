-- completeSet: completes a set of records, each under its own fence, and
-- finishes their executions, in one statement (after generic_plan.sql).
--
-- "u" holds the calls, one row each, numbered n, from parallel arrays:
-- $1 org, $2 principal, $3 key, $4 fencing token, $5 state, $6 status,
-- $7 headers as JSON text, $8 body, $9 sealed key id, $10 secret expiry,
-- $11 outcome, $12 code, $13 attempts, $14 NOTIFY payload, $15 the
-- execution its events name, if any. "r" holds all their events,
-- flattened, from parallel arrays: $17 the number of each one's call,
-- then $18 types, $19 times, $20 attempt, $21 codes, $22 previous error
-- codes, $23 attempts, $24 durations (ms), $25 data as JSON text. $16 is
-- now.
--
-- "done" is the fenced UPDATE of every record: a call whose record is no
-- longer in flight under its token and lease matches nothing and writes
-- nothing, and neither does one whose events name another execution than
-- the record's, so that a call's failure is never its neighbours'. It
-- carries each call's finish along, so that "fin", "ev" and "notified"
-- (which finish the completed calls' executions, append their events in
-- order and NOTIFY their watched records on idem_completed,
-- completedChannel) read "done" alone, never "u" again: each join costs
-- in proportion to the batch, not its square. The statement returns, for
-- each completed record, its call's number, the counts of executions
-- finished, events appended and notifications sent (the same on every
-- row; an execution not found is a count short: the batch fails), and
-- the record (scanAttempt's columns). The tables are as few as
-- complete_attempt.sql's: each one more (a read telling the calls not
-- completed apart, say) would cost every batch its partitions' planning
-- and start-up.
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::int[], $7::text[],
        $8::bytea[], $9::text[], $10::timestamptz[], $11::text[], $12::text[], $13::int[], $14::text[], $15::text[])
        WITH ORDINALITY AS u(org, principal, key, token, state, status, headers, body, sealed_key_id,
            secret_expires_at, outcome, code, attempts, payload, named, n)),
done AS (
    UPDATE idem_attempts a SET
        state = u.state, status = u.status, headers = u.headers::jsonb, body = u.body,
        sealed_key_id = u.sealed_key_id, completed_at = $16, secret_expires_at = u.secret_expires_at
    FROM u
    WHERE a.org = u.org AND a.principal = u.principal AND a.key = u.key AND a.fencing_token = u.token
        AND a.state = 'in_flight' AND a.lease_expires_at > $16::timestamptz
        AND (u.named IS NULL OR u.named = a.execution_id)
    RETURNING u.n, u.outcome, u.code, u.attempts AS finish_attempts, u.payload, a.watched,
        a.org, a.principal, a.key, a.operation, a.fingerprint, a.state, a.execution_id, a.fencing_token,
        a.lease_expires_at, a.status, a.headers, a.body, a.sealed_key_id, a.created_at, a.completed_at,
        a.expires_at, a.secret_expires_at),
fin AS (
    UPDATE idem_executions x SET outcome = done.outcome, code = done.code, attempts = done.finish_attempts,
        finished_at = $16
    FROM done
    WHERE x.org = done.org AND x.id = done.execution_id
    RETURNING 1),
ev AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    SELECT done.org, done.execution_id, r.type, r.at, r.attempt, r.code, r.previous_error_code, r.attempts,
        r.duration_ms, r.data::jsonb
    FROM unnest($17::int8[], $18::text[], $19::timestamptz[], $20::int[], $21::text[], $22::text[], $23::int[],
            $24::int8[], $25::text[])
        WITH ORDINALITY AS r(call, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, m)
    JOIN done ON done.n = r.call
    ORDER BY r.m
    RETURNING 1),
notified AS (SELECT pg_notify('idem_completed', payload) FROM done WHERE watched)
SELECT n, (SELECT count(*) FROM fin), (SELECT count(*) FROM ev), (SELECT count(*) FROM notified),
    org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM done
