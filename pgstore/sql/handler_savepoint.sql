-- Transact: the savepoint around the handler's writes, opened in the
-- round trip that begins the transaction and ended in the completion's.

-- name: open
SAVEPOINT idem_handler

-- name: release
-- The handler's writes stay.
RELEASE SAVEPOINT idem_handler

-- name: rollback
-- The handler asked to undo its writes (the execution's are kept).
ROLLBACK TO SAVEPOINT idem_handler
