-- The index diet (issue 36 item 3; docs/store.md, "Indexes"): every index
-- of idem's tables serves a named statement of the hot path or of the
-- sweeper, and adds an entry on the request path only when that statement
-- needs one.
--
-- idem_records_started (started_at) served one statement, the audit
-- retention's removal of executions whose record no longer holds a key
-- (sweep.sql: remove_executions, "started_at <= $1 AND NOT held"), yet
-- every insert of a keyed record, held from the start, paid an entry in
-- it. Partial on NOT held, a record enters it when it lets its key go
-- (forgotten by the sweeper, or released), a write off the request path
-- that rewrites the row anyway; an unkeyed execution, which holds no key,
-- enters it when inserted, as before. A transactional first execution
-- adds five index entries instead of six, a two-phase one (inserted, then
-- completed) one fewer at each write.
CREATE INDEX idem_records_released ON idem_records (started_at) WHERE NOT held;
DROP INDEX idem_records_started;
