-- Transact, keyed and without an approval, at the start (transactfinal.go):
-- tries the key's advisory lock, bounds how long the rest of the
-- transaction may sit idle (as idle_timeout.sql does), and reads the
-- record holding the key, in one statement. Its snapshot is taken before
-- the try, so a holder that committed in between is not seen: the final
-- insert then meets that holder's row in the unique index on held keys,
-- and the caller answers the key as busy (nothing of the execution
-- commits).
--
-- $1 org, $2 principal, $3 key, $4 the key lock's seed (keyLockSeed), $5
-- the idle timeout in milliseconds.
--
-- Returns one row: whether the lock was taken, whether a record holds
-- the key, then the record (scanAttempt's columns, empty when none).
SELECT l.got, r.id IS NOT NULL,
    COALESCE(r.org, ''), COALESCE(r.principal, ''), COALESCE(r.key, ''), COALESCE(r.operation, ''),
    COALESCE(r.fingerprint, ''), COALESCE(r.state, ''), COALESCE(r.id, ''), COALESCE(r.fencing_token, 0),
    r.lease_expires_at, r.status, r.headers, r.body, r.sealed_key_id, r.started_at, r.completed_at, r.expires_at,
    r.secret_expires_at, COALESCE(r.attempts, 0), r.fingerprint_version
FROM (SELECT pg_try_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, $4::int8)) AS got,
        set_config('idle_in_transaction_session_timeout', $5::text, true) AS idle) l
LEFT JOIN idem_records r ON r.org = $1 AND r.principal = $2 AND r.key = $3 AND r.held
