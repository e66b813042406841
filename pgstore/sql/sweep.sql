-- Sweep: the row steps, run in one transaction, in this order. Each
-- takes at most $2 rows with FOR UPDATE SKIP LOCKED, so that concurrent
-- sweepers split the work instead of queueing, and rows a reservation or
-- completion holds are left for a later round. MATERIALIZED keeps the
-- locked batch from being re-planned into the outer statement. $1 is now
-- in the first four, the audit retention window's start in the last two
-- (run only with an audit retention).

-- name: forget_attempts
-- Rows in time partitions go with their partition (maintainPartitions);
-- only the DEFAULT partition is swept by row. A record in flight within
-- its lease is never forgotten.
WITH batch AS MATERIALIZED (
    SELECT org, principal, key, created_at FROM idem_attempts_default
    WHERE expires_at <= $1 AND NOT (state = 'in_flight' AND lease_expires_at > $1)
    LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM idem_attempts_default a USING batch b
WHERE a.org = b.org AND a.principal = b.principal AND a.key = b.key AND a.created_at = b.created_at

-- name: destroy_secrets
-- The ciphertext goes; the record stays as a tombstone. (A secret attempt
-- left indeterminate keeps its state.)
WITH batch AS MATERIALIZED (
    SELECT org, principal, key, created_at FROM idem_attempts
    WHERE body IS NOT NULL AND secret_expires_at <= $1 AND expires_at > $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_attempts a
SET body = NULL, state = CASE a.state WHEN 'completed' THEN 'expired' ELSE a.state END
FROM batch b
WHERE a.org = b.org AND a.principal = b.principal AND a.key = b.key AND a.created_at = b.created_at

-- name: expire_leases
-- The status stays NULL: nothing is known about the result.
WITH batch AS MATERIALIZED (
    SELECT org, principal, key, created_at FROM idem_attempts
    WHERE state = 'in_flight' AND lease_expires_at <= $1 AND expires_at > $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_attempts a SET state = 'indeterminate'
FROM batch b
WHERE a.org = b.org AND a.principal = b.principal AND a.key = b.key AND a.created_at = b.created_at

-- name: expire_approvals
WITH batch AS MATERIALIZED (
    SELECT org, id FROM idem_approvals
    WHERE status IN ('pending', 'approved') AND expires_at <= $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_approvals a SET status = 'expired'
FROM batch b
WHERE a.org = b.org AND a.id = b.id

-- name: remove_executions
-- Past the audit retention, the executions of the DEFAULT partition; the
-- rest go with their partition. An execution and its events may sit in
-- different partitions, so each table is swept on its own: an event left
-- after its execution is never read (GetExecution finds no execution
-- first, and no event is appended to a missing execution), and goes when
-- its own time is past the window.
WITH batch AS MATERIALIZED (
    SELECT org, id, started_at FROM idem_executions_default WHERE started_at <= $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM idem_executions_default x USING batch b
WHERE x.org = b.org AND x.id = b.id AND x.started_at = b.started_at

-- name: remove_events
-- Past the audit retention, the events of the DEFAULT partition.
WITH batch AS MATERIALIZED (
    SELECT org, id, at FROM idem_audit_events_default WHERE at <= $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM idem_audit_events_default e USING batch b
WHERE e.org = b.org AND e.id = b.id AND e.at = b.at
