-- Transact: the savepoint around the handler's writes, opened in the
-- round trip that begins the transaction. When the handler's writes
-- stay, the commit releases it (no statement of its own).

-- name: open
SAVEPOINT idem_handler

-- name: rollback
-- The handler asked to undo its writes (the execution's are kept).
ROLLBACK TO SAVEPOINT idem_handler
