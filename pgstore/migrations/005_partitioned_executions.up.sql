-- Executions and their audit events become tables partitioned by time,
-- idem_executions by started_at and idem_audit_events by at, in daily
-- ranges starting at 00 UTC, so that the audit retention drops whole
-- partitions instead of deleting rows (docs/store.md, "Audit retention";
-- the span is pgstore.auditPartitionSpan and must match). As for
-- idem_attempts (migration 002), the sweeper creates the partitions ahead
-- of time (idem_executions_pYYYYMMDD, idem_audit_events_pYYYYMMDD, named
-- after the UTC day they hold) and drops those whose range ended before
-- the window; each table's DEFAULT partition catches rows whose range has
-- none yet.
--
-- The primary keys gain the partition column: (org, id, started_at) and
-- (org, id, at). Execution ids are made unique by their creator, and event
-- ids by their identity sequence, so nothing relied on the database to
-- refuse a duplicate. Lookups by (org, id) use the primary key's index in
-- every partition.
--
-- Existing rows are moved: each day that has rows gets its partition here
-- (days taken from the rows themselves, not from now()), so the DEFAULT
-- partitions start empty. The identity sequences carry on from the old
-- tables' values.

ALTER TABLE idem_executions RENAME TO idem_executions_004;
ALTER INDEX idem_executions_pkey RENAME TO idem_executions_004_pkey;
DROP INDEX idem_executions_intent, idem_executions_recent;
ALTER TABLE idem_audit_events RENAME TO idem_audit_events_004;
ALTER INDEX idem_audit_events_pkey RENAME TO idem_audit_events_004_pkey;
DROP INDEX idem_audit_events_execution;

CREATE TABLE idem_executions (
    org             text        NOT NULL,
    id              text        NOT NULL,
    principal       text        NOT NULL,
    operation       text        NOT NULL,
    fingerprint     text        NOT NULL,
    key             text,
    attempts        integer     NOT NULL,
    outcome         text        NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed')),
    code            text,
    reinvocation_of text,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    -- Insertion order: breaks ties between equal started_at.
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (org, id, started_at)
) PARTITION BY RANGE (started_at);

CREATE TABLE idem_executions_default PARTITION OF idem_executions DEFAULT;

CREATE INDEX idem_executions_intent ON idem_executions (org, principal, operation, fingerprint, started_at DESC, seq DESC);
-- ListExecutions reads an org's executions newest first.
CREATE INDEX idem_executions_recent ON idem_executions (org, started_at DESC, seq DESC);

CREATE TABLE idem_audit_events (
    org                 text        NOT NULL,
    id                  bigint      GENERATED ALWAYS AS IDENTITY,
    execution_id        text        NOT NULL,
    type                text        NOT NULL,
    at                  timestamptz NOT NULL,
    attempt             integer,
    code                text,
    previous_error_code text,
    attempts            integer,
    duration_ms         bigint,
    data                jsonb,
    PRIMARY KEY (org, id, at)
) PARTITION BY RANGE (at);

CREATE TABLE idem_audit_events_default PARTITION OF idem_audit_events DEFAULT;

CREATE INDEX idem_audit_events_execution ON idem_audit_events (org, execution_id, id);

DO $$
DECLARE
    day timestamp; -- UTC
BEGIN
    FOR day IN SELECT DISTINCT date_trunc('day', started_at AT TIME ZONE 'UTC') FROM idem_executions_004 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF idem_executions FOR VALUES FROM (%L) TO (%L)',
            'idem_executions_p' || to_char(day, 'YYYYMMDD'),
            day AT TIME ZONE 'UTC', (day + interval '1 day') AT TIME ZONE 'UTC');
    END LOOP;
    FOR day IN SELECT DISTINCT date_trunc('day', at AT TIME ZONE 'UTC') FROM idem_audit_events_004 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF idem_audit_events FOR VALUES FROM (%L) TO (%L)',
            'idem_audit_events_p' || to_char(day, 'YYYYMMDD'),
            day AT TIME ZONE 'UTC', (day + interval '1 day') AT TIME ZONE 'UTC');
    END LOOP;
END
$$;

INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key, attempts, outcome, code,
        reinvocation_of, started_at, finished_at, seq)
    OVERRIDING SYSTEM VALUE
    SELECT org, id, principal, operation, fingerprint, key, attempts, outcome, code,
        reinvocation_of, started_at, finished_at, seq
    FROM idem_executions_004;

INSERT INTO idem_audit_events (org, id, execution_id, type, at, attempt, code, previous_error_code,
        attempts, duration_ms, data)
    OVERRIDING SYSTEM VALUE
    SELECT org, id, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data
    FROM idem_audit_events_004;

SELECT setval(pg_get_serial_sequence('idem_executions', 'seq'), COALESCE((SELECT max(seq) FROM idem_executions_004), 0) + 1, false);
SELECT setval(pg_get_serial_sequence('idem_audit_events', 'id'), COALESCE((SELECT max(id) FROM idem_audit_events_004), 0) + 1, false);

DROP TABLE idem_executions_004, idem_audit_events_004;
