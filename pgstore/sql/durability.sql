-- DurabilityReport: the settings a commit runs under and the standbys it
-- could be replicated to, all read on one connection.

-- name: synchronous_commit
SHOW synchronous_commit

-- name: synchronous_standby_names
SHOW synchronous_standby_names

-- name: replication
-- Whether this is a standby, and the streaming standbys, synchronous
-- ones and unclassifiable connections. state and sync_state are NULL for
-- a role without pg_read_all_stats. A walsender in 'backup' state
-- (pg_basebackup) or still catching up is not a standby a commit can rely
-- on.
SELECT pg_is_in_recovery(),
    count(*) FILTER (WHERE state = 'streaming'),
    count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')),
    count(*) FILTER (WHERE state IS NULL)
FROM pg_stat_replication
