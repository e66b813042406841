-- settleLease: makes the passed lease of a record read in flight durable
-- (state indeterminate) before anyone is told. It waits, bounded by
-- lock_timeout.sql, for an effect transaction holding the row
-- (check_fence.sql). $1 org, $2 principal, $3 key, $4 fencing token, $5
-- now. Returns the record (scanAttempt's columns), or no row when it
-- changed meanwhile.
UPDATE idem_records SET state = 'indeterminate'
WHERE org = $1 AND principal = $2 AND key = $3 AND held AND fencing_token = $4
    AND state = 'in_flight' AND lease_expires_at <= $5
RETURNING org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
