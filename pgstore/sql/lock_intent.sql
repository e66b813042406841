-- RequestApproval: the transaction-scoped advisory lock of an intent, so
-- that concurrent requests for it, from any instance, queue. $1 the
-- intent, "org/principal/operation/fingerprint".
SELECT pg_advisory_xact_lock(hashtextextended($1, 0))
