-- Sweep: the row steps, run in one transaction, in this order. Each
-- takes at most $2 rows with FOR UPDATE SKIP LOCKED, so that concurrent
-- sweepers split the work instead of queueing, and rows a reservation or
-- completion holds are left for a later round. MATERIALIZED keeps the
-- locked batch from being re-planned into the outer statement. Each scan
-- is on an index of its own (migrations 006 and 009). $1 is now in the first
-- four, the audit retention window's start in the last two (run only
-- with an audit retention).

-- name: forget_attempts
-- A record past retention lets its key go; its result (headers, body)
-- goes with it, its execution stays for the audit. A record in flight
-- within its lease is never forgotten.
WITH batch AS MATERIALIZED (
    SELECT org, id FROM idem_records
    WHERE held AND expires_at <= $1 AND NOT (state = 'in_flight' AND lease_expires_at > $1)
    LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_records r SET held = false, headers = NULL, body = NULL
FROM batch b
WHERE r.org = b.org AND r.id = b.id

-- name: destroy_secrets
-- The ciphertext goes; the record stays as a tombstone. (A secret attempt
-- left indeterminate keeps its state.)
WITH batch AS MATERIALIZED (
    SELECT org, id FROM idem_records
    WHERE body IS NOT NULL AND secret_expires_at <= $1 AND held AND expires_at > $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_records r
SET body = NULL, state = CASE r.state WHEN 'completed' THEN 'expired' ELSE r.state END
FROM batch b
WHERE r.org = b.org AND r.id = b.id

-- name: expire_leases
-- The status stays NULL: nothing is known about the result.
WITH batch AS MATERIALIZED (
    SELECT org, id FROM idem_records
    WHERE leased AND lease_expires_at <= $1 AND expires_at > $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_records r SET state = 'indeterminate'
FROM batch b
WHERE r.org = b.org AND r.id = b.id

-- name: expire_approvals
WITH batch AS MATERIALIZED (
    SELECT org, id FROM idem_approvals
    WHERE status IN ('pending', 'approved') AND expires_at <= $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE idem_approvals a SET status = 'expired'
FROM batch b
WHERE a.org = b.org AND a.id = b.id

-- name: remove_executions
-- Past the audit retention, executions whose record no longer holds a
-- key (AuditRetention is at least Retention, so by then none does).
WITH batch AS MATERIALIZED (
    SELECT org, id FROM idem_records WHERE started_at <= $1 AND NOT held
    LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM idem_records r USING batch b
WHERE r.org = b.org AND r.id = b.id

-- name: remove_events
-- Past the audit retention, appended events. One left after its
-- execution is never read (GetExecution finds no execution first, and no
-- event is appended to a missing execution), and goes when its own time
-- is past the window.
WITH batch AS MATERIALIZED (
    SELECT org, id FROM idem_audit_events WHERE at <= $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM idem_audit_events e USING batch b
WHERE e.org = b.org AND e.id = b.id
