-- settleLease: the record a fencing token names, as committed, when
-- mark_indeterminate.sql found it changed (scanAttempt's columns). $1
-- org, $2 principal, $3 key, $4 fencing token.
SELECT org, principal, key, operation, fingerprint, state, id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, started_at, completed_at, expires_at, secret_expires_at, attempts, fingerprint_version
FROM idem_records
WHERE org = $1 AND principal = $2 AND key = $3 AND held AND fencing_token = $4
