-- Sweep's partition changes (partitions.go): idem_attempts,
-- idem_executions and idem_audit_events are partitioned by range of a
-- time column, and these statements make and drop their partitions, each
-- change in a transaction of its own (after lock_timeout.sql and "lock").
--
-- Placeholders. DDL takes no parameters, so the partition's name and
-- bounds must be written into the statement; and the three tables share
-- these statements, so their names are written in too. Before a
-- statement runs, partitioned.fill replaces
--     {{table}}      the partitioned table, e.g. "idem_attempts"
--     {{partition}}  the partition, e.g. "idem_attempts_p2026113012"
--     {{default}}    the table's DEFAULT partition, e.g. "idem_attempts_default"
--     {{column}}     the column it is partitioned by, e.g. "created_at"
--     {{from}}       the partition's first time, RFC 3339 in UTC
--     {{to}}         the time its range ends before, likewise
-- (names as quoted identifiers, times as the text of a literal). Every
-- value is made by the store from its own constants and the time; none
-- comes from a caller.

-- name: list
-- The table's partitions. $1 the table.
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass

-- name: lock
-- The transaction-scoped advisory lock that serialises partition changes
-- across instances. $1 partitionLock.
SELECT pg_advisory_xact_lock($1)

-- name: probe
-- Before creating a partition: whether it exists, and how many rows of
-- its range the DEFAULT partition holds, counting at most $4. $1 the
-- partition's name, $2 and $3 its range.
SELECT to_regclass($1) IS NOT NULL, (SELECT count(*) FROM (
    SELECT FROM {{default}} WHERE {{column}} >= $2 AND {{column}} < $3 LIMIT $4) r)

-- name: create
-- A new partition, when the DEFAULT partition holds no row of its range.
CREATE TABLE {{partition}} PARTITION OF {{table}} FOR VALUES FROM ('{{from}}') TO ('{{to}}')

-- name: lock_table
-- Before a partition is dropped, or made with rows to move: nothing reads
-- or writes the table until the transaction ends.
LOCK TABLE ONLY {{table}} IN ACCESS EXCLUSIVE MODE

-- name: create_detached
-- A new partition whose rows are in the DEFAULT partition, made apart
-- (under lock_table): move_rows fills it, attach makes it a partition.
CREATE TABLE {{partition}} (LIKE {{table}} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)

-- name: move_rows
WITH moved AS (DELETE FROM {{default}} WHERE {{column}} >= '{{from}}' AND {{column}} < '{{to}}' RETURNING *)
INSERT INTO {{partition}} SELECT * FROM moved

-- name: attach
-- Makes the partition's indexes and checks the DEFAULT partition, now
-- without rows of the range.
ALTER TABLE {{table}} ATTACH PARTITION {{partition}} FOR VALUES FROM ('{{from}}') TO ('{{to}}')

-- name: attempts_live
-- Whether an attempt partition holds a live row at $1 (now): one within
-- retention, or in flight within its lease. While it does, it stays.
SELECT EXISTS (SELECT FROM {{partition}} WHERE expires_at > $1 OR (state = 'in_flight' AND lease_expires_at > $1))

-- name: drop
-- Under lock_table.
DROP TABLE {{partition}}
