-- Transact: the statements that end a transactional execution's
-- transaction inside the round trip of its last statement (pgx's
-- Tx.Commit would cost one of its own), or start it again without the
-- handler's writes.

-- name: commit
-- Queued after the statement that stores the outcome.
COMMIT

-- name: rollback_and_chain
-- A business error (TxOutcome.Undo): the whole transaction rolls back,
-- the handler's writes with it, and a new one begins at once, in which
-- the call's own statements run again (no savepoint on the common path).
ROLLBACK AND CHAIN
