-- The newest record of a key, forgotten or not: the caller checks
-- retention (scanAttempt's columns). $1 org, $2 principal, $3 key.
SELECT org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
    lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
FROM idem_attempts
WHERE org = $1 AND principal = $2 AND key = $3
ORDER BY created_at DESC
LIMIT 1
