-- AppendEvents (and the events of a finish that name another execution):
-- rows of idem_audit_events, each only if its execution exists in the
-- org, with how many of that record's own events precede it (pos).

-- name: one
-- One event, for up to four (manyEvents), one statement each, in a
-- batch: cheaper than "many" for so few. Inserts nothing when the
-- execution does not exist (the caller reads NOT_FOUND from the count).
-- $1 org, $2 execution id, $3 type, $4 at, $5 attempt, $6 code, $7
-- previous error code, $8 attempts, $9 duration (ms), $10 data as JSON
-- text.
INSERT INTO idem_audit_events (org, execution_id, pos, type, at, attempt, code,
    previous_error_code, attempts, duration_ms, data)
SELECT $1::text, $2::text, jsonb_array_length(events), $3::text, $4::timestamptz, $5::int, $6::text, $7::text,
    $8::int, $9::int8, $10::jsonb
FROM idem_records WHERE org = $1 AND id = $2

-- name: many
-- More events, in one statement, in their order, but only if every
-- event's execution exists in the org. $1 org; $2 to $10 the events as
-- parallel arrays: execution ids, types, times, attempt, codes, previous
-- error codes, attempts, durations (ms), data as JSON text. Returns the
-- first execution id that does not exist (NULL when all do) and how many
-- rows it inserted. Each event's record is read by a scalar subquery, a
-- probe of the primary key per event, which the planner cannot turn into
-- a join that reads the org's every record (issue 36).
WITH e AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::int8[], $6::text[], $7::text[],
        $8::int8[], $9::int8[], $10::text[])
        WITH ORDINALITY AS e(execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, n)),
missing AS (
    SELECT execution_id FROM e
    WHERE (SELECT x.id FROM idem_records x WHERE x.org = $1 AND x.id = e.execution_id) IS NULL
    ORDER BY n LIMIT 1),
ins AS (
    INSERT INTO idem_audit_events (org, execution_id, pos, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    SELECT $1, e.execution_id,
        jsonb_array_length((SELECT x.events FROM idem_records x WHERE x.org = $1 AND x.id = e.execution_id)),
        e.type, e.at, e.attempt, e.code, e.previous_error_code, e.attempts, e.duration_ms, e.data::jsonb
    FROM e
    WHERE NOT EXISTS (SELECT FROM missing) ORDER BY e.n
    RETURNING 1)
SELECT (SELECT execution_id FROM missing), (SELECT count(*) FROM ins)
