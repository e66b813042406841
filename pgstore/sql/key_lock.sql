-- The transaction-scoped advisory lock of a key, (org, principal, key):
-- Reserve and a keyed RequestApproval take it, so that they queue from
-- any instance and each reads what the previous holder committed.
-- $1 org, $2 principal, $3 key, $4 the hash's seed (keyLockSeed).

-- name: lock
-- Waits for the lock.
SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, $4))

-- name: try
-- Returns true when the lock is taken, false at once when another
-- transaction holds it (Transact). In the same statement, it bounds how
-- long the rest of the transaction may sit idle, as idle_timeout.sql
-- does: $5 the timeout in milliseconds.
SELECT pg_try_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, $4)),
    set_config('idle_in_transaction_session_timeout', $5, true)
