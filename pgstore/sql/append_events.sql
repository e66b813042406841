-- AppendEvents: the statements that append events to executions of an
-- org, each event only if its execution exists there.

-- name: one
-- One event, for up to four (manyEvents), one statement each, in a
-- batch: cheaper than "many" for so few. Inserts nothing when the
-- execution does not exist (the caller reads NOT_FOUND from the count).
-- $1 org, $2 execution id, $3 type, $4 at, $5 attempt, $6 code, $7
-- previous error code, $8 attempts, $9 duration (ms), $10 data as JSON
-- text.
INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code,
    previous_error_code, attempts, duration_ms, data)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb
WHERE EXISTS (SELECT 1 FROM idem_executions WHERE org = $1 AND id = $2)

-- name: many
-- More events, in one statement, in their order, but only if every
-- event's execution exists in the org. $1 org; $2 to $10 the events as
-- parallel arrays: execution ids, types, times, attempt, codes, previous
-- error codes, attempts, durations (ms), data as JSON text. Returns the
-- first execution id that does not exist (NULL when all do) and how many
-- rows it inserted.
WITH e AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::int8[], $6::text[], $7::text[],
        $8::int8[], $9::int8[], $10::text[])
        WITH ORDINALITY AS e(execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, n)),
missing AS (
    SELECT execution_id FROM e
    WHERE NOT EXISTS (SELECT 1 FROM idem_executions x WHERE x.org = $1 AND x.id = e.execution_id)
    ORDER BY n LIMIT 1),
ins AS (
    INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    SELECT $1, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data::jsonb
    FROM e WHERE NOT EXISTS (SELECT FROM missing) ORDER BY n
    RETURNING 1)
SELECT (SELECT execution_id FROM missing), (SELECT count(*) FROM ins)
