-- A keyed transactional execution rolled back: signals idem_completed
-- (completedChannel) in a transaction of its own, after the aborted one,
-- whose NOTIFY would never leave. Waiters on other instances then read
-- the key again at once and find it free.
--
-- $1 the NOTIFY payload (notifyPayload).
SELECT pg_notify('idem_completed', $1::text)
