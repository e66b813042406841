-- Migrate: the bookkeeping around the embedded migrations
-- (migrations/*.up.sql, which run as they are).

-- name: lock
-- The session-level advisory lock that serialises Migrate across
-- processes. $1 migrationLock.
SELECT pg_advisory_lock($1)

-- name: unlock
-- $1 migrationLock.
SELECT pg_advisory_unlock($1)

-- name: create_table
CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL
)

-- name: applied
SELECT version FROM idem_schema_migrations

-- name: record
-- A migration applied, in its transaction. $1 version, $2 name, $3 when.
INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)
