-- FinishExecution (and an unkeyed transactional execution): records the
-- execution's outcome and appends its own events (those naming another
-- execution go through append_events.sql in the same transaction).
--
-- $1 org, $2 execution id, $3 outcome, $4 code, $5 attempts, $6 now, $7
-- the events (a JSON array, storedEvent's form). No row is updated when
-- the execution does not exist.
UPDATE idem_records SET outcome = $3, code = $4, attempts = $5, finished_at = $6, events = events || $7::jsonb
WHERE org = $1 AND id = $2
