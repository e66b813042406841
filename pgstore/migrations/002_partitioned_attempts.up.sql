-- Attempt records become a table partitioned by time of creation, in
-- six-hour ranges starting at 00, 06, 12 and 18 UTC, so that retention
-- drops whole partitions instead of deleting rows (docs/store.md,
-- "Partitions"; the span is pgstore.partitionSpan and must match). The
-- sweeper creates the partitions ahead of time (idem_attempts_pYYYYMMDDHH,
-- named after the UTC hour they start at) and drops those whose every row
-- is past retention; the DEFAULT partition catches rows whose range has
-- none yet.
--
-- A partitioned table's primary key must contain the partition column, so
-- (org, principal, key) is no longer unique in the database: Reserve keeps
-- at most one row per key under a transaction-scoped advisory lock on the
-- key. The primary key (org, principal, key, created_at) is also the index
-- every key lookup uses, newest first by a backward scan.
--
-- Existing rows are moved: each range that has rows gets its partition
-- here (times taken from the rows themselves, not from now()), so the
-- DEFAULT partition starts empty.

ALTER TABLE idem_attempts RENAME TO idem_attempts_001;
ALTER INDEX idem_attempts_pkey RENAME TO idem_attempts_001_pkey;
DROP INDEX idem_attempts_expires_at, idem_attempts_lease, idem_attempts_secret;

CREATE TABLE idem_attempts (
    org               text        NOT NULL,
    principal         text        NOT NULL,
    key               text        NOT NULL,
    operation         text        NOT NULL,
    fingerprint       text        NOT NULL,
    state             text        NOT NULL CHECK (state IN ('in_flight', 'completed', 'indeterminate', 'expired')),
    execution_id      text        NOT NULL,
    fencing_token     bigint      NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    status            integer,
    headers           jsonb,
    body              bytea,
    sealed_key_id     text,
    created_at        timestamptz NOT NULL,
    completed_at      timestamptz,
    expires_at        timestamptz NOT NULL,
    secret_expires_at timestamptz,
    PRIMARY KEY (org, principal, key, created_at)
) PARTITION BY RANGE (created_at);

CREATE TABLE idem_attempts_default PARTITION OF idem_attempts DEFAULT;

-- The sweeper's scans, and its check that a partition holds no live row.
CREATE INDEX idem_attempts_expires_at ON idem_attempts (expires_at);
CREATE INDEX idem_attempts_lease ON idem_attempts (lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX idem_attempts_secret ON idem_attempts (secret_expires_at) WHERE body IS NOT NULL AND secret_expires_at IS NOT NULL;

DO $$
DECLARE
    start timestamp; -- UTC
BEGIN
    FOR start IN SELECT DISTINCT date_trunc('day', created_at AT TIME ZONE 'UTC')
            + floor(extract(hour FROM created_at AT TIME ZONE 'UTC') / 6) * interval '6 hours'
            FROM idem_attempts_001 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF idem_attempts FOR VALUES FROM (%L) TO (%L)',
            'idem_attempts_p' || to_char(start, 'YYYYMMDDHH24'),
            start AT TIME ZONE 'UTC', (start + interval '6 hours') AT TIME ZONE 'UTC');
    END LOOP;
END
$$;

INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at)
    SELECT org, principal, key, operation, fingerprint, state, execution_id, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at
    FROM idem_attempts_001;

DROP TABLE idem_attempts_001;
