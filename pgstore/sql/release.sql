-- Release: deletes a reservation still in flight under its fence and
-- lease and signals a watched one on idem_completed (completedChannel),
-- so that waiters on other instances look again and find the key free.
-- $1 org, $2 principal, $3 key, $4 fencing token, $5 now, $6 the NOTIFY
-- payload (notifyPayload). Returns the record's execution id and the
-- number of notifications; no row when fenced.
WITH gone AS (
    DELETE FROM idem_attempts
    WHERE org = $1 AND principal = $2 AND key = $3 AND fencing_token = $4
        AND state = 'in_flight' AND lease_expires_at > $5
    RETURNING execution_id, watched),
notified AS (SELECT pg_notify('idem_completed', $6::text) FROM gone WHERE watched)
SELECT execution_id, (SELECT count(*) FROM notified) FROM gone
