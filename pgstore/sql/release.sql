-- Release: a reservation still in flight under its fence and lease lets
-- its key go (its execution stays, finished with $7 to $10) and a
-- watched one is signalled on idem_completed (completedChannel), so that
-- waiters on other instances look again and find the key free.
--
-- $1 org, $2 principal, $3 key, $4 fencing token, $5 now, $6 the NOTIFY
-- payload (notifyPayload), $7 outcome, $8 code, $9 attempts, $10 the
-- execution's own final events (a JSON array, storedEvent's form),
-- appended only if the record's execution is $11 or $11 is empty, as in
-- complete_attempt.sql; $12 the approval to give back
-- (FinishParams.ReturnApproval, as in return_approval.sql), or ''.
--
-- Returns the record's execution id and the number of notifications; no
-- row when fenced.
WITH gone AS (
    UPDATE idem_records SET held = false,
        outcome = $7, code = $8, attempts = $9, finished_at = $5,
        events = events || CASE WHEN $11::text = '' OR id = $11::text THEN $10::jsonb ELSE '[]'::jsonb END
    WHERE org = $1 AND principal = $2 AND key = $3 AND held AND fencing_token = $4
        AND state = 'in_flight' AND lease_expires_at > $5
    RETURNING id, watched),
notified AS (SELECT pg_notify('idem_completed', $6::text) FROM gone WHERE watched),
returned AS (
    UPDATE idem_approvals SET status = 'approved', consumed_at = NULL, execution_id = NULL
    WHERE org = $1 AND id = $12::text AND execution_id = (SELECT id FROM gone) AND status = 'consumed')
SELECT id, (SELECT count(*) FROM notified) FROM gone
