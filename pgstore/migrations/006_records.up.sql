-- One record per execution (docs/store.md, "One record per execution"):
-- idem_records replaces idem_attempts, idem_executions and the partitioned
-- idem_audit_events. A row is an execution; a keyed one carries its
-- attempt record's columns too, and "held" says the row still holds its
-- key (keyed, not forgotten, not released), so that one unique index on
-- (org, principal, key) among held rows is the lookup of every key. The
-- events an execution's own statements write (started, approval consumed,
-- retried, the final one) travel with it in "events", a JSON array:
-- {"type", "at" (unix microseconds), "attempt", "code",
-- "previousErrorCode", "attempts", "durationMs", "data"}, each field only
-- when set. Events appended later (AppendEvents: replays, from the audit
-- queue) are rows of idem_audit_events, each placed after the first "pos"
-- events of the record, so that the timeline reads as it was written.
--
-- Nothing is partitioned: retention forgets a key by clearing "held",
-- "headers" and "body", and removes rows past the audit retention in
-- batched deletes by an indexed time (sql/sweep.sql).
--
-- Existing rows are moved: each execution with its attempt record (by
-- execution id) and its events in order; an attempt record whose
-- execution is gone gets one, so that no live key is lost. Events whose
-- execution is gone are dropped (nothing could read them).

CREATE TABLE idem_records (
    org               text        NOT NULL,
    id                text        NOT NULL,
    principal         text        NOT NULL,
    operation         text        NOT NULL,
    fingerprint       text        NOT NULL,
    key               text,
    held              boolean     NOT NULL DEFAULT false,
    state             text        CHECK (state IN ('in_flight', 'completed', 'indeterminate', 'expired')),
    fencing_token     bigint,
    lease_expires_at  timestamptz,
    status            integer,
    headers           jsonb,
    body              bytea,
    sealed_key_id     text,
    completed_at      timestamptz,
    expires_at        timestamptz,
    secret_expires_at timestamptz,
    watched           boolean     NOT NULL DEFAULT false,
    -- In flight under a lease, for the sweeper's scan of passed leases:
    -- a column no statement of a call names, so that the planner never
    -- takes that small index for a lookup by key.
    leased            boolean     GENERATED ALWAYS AS (held AND state = 'in_flight') STORED,
    attempts          integer     NOT NULL,
    outcome           text        NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed')),
    code              text,
    reinvocation_of   text,
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz,
    events            jsonb       NOT NULL,
    -- Insertion order: breaks ties between equal started_at.
    seq               bigint      GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (org, id),
    CHECK (NOT held OR (key IS NOT NULL AND state IS NOT NULL))
);

-- reinvocation_of: the most recent earlier execution of an intent.
CREATE INDEX idem_records_intent ON idem_records (org, principal, operation, fingerprint, started_at DESC, seq DESC);
-- ListExecutions: an org's executions, newest first.
CREATE INDEX idem_records_recent ON idem_records (org, started_at DESC, seq DESC);
-- The sweeper's scans: keys past retention, leases past their end,
-- secrets past their window, executions past the audit retention.
CREATE INDEX idem_records_expires ON idem_records (expires_at) WHERE held;
CREATE INDEX idem_records_lease ON idem_records (lease_expires_at) WHERE leased;
CREATE INDEX idem_records_secret ON idem_records (secret_expires_at) WHERE body IS NOT NULL AND secret_expires_at IS NOT NULL;
CREATE INDEX idem_records_started ON idem_records (started_at);

INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, completed_at, expires_at, secret_expires_at, watched,
        attempts, outcome, code, reinvocation_of, started_at, finished_at, events)
    SELECT x.org, x.id, x.principal, x.operation, x.fingerprint, x.key, a.org IS NOT NULL, a.state, a.fencing_token,
        a.lease_expires_at, a.status, a.headers, a.body, a.sealed_key_id, a.completed_at, a.expires_at,
        a.secret_expires_at, COALESCE(a.watched, false),
        x.attempts, x.outcome, x.code, x.reinvocation_of, x.started_at, x.finished_at,
        COALESCE((SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                'type', e.type, 'at', (extract(epoch FROM e.at) * 1000000)::int8, 'attempt', e.attempt,
                'code', e.code, 'previousErrorCode', e.previous_error_code, 'attempts', e.attempts,
                'durationMs', e.duration_ms, 'data', e.data)) ORDER BY e.id)
            FROM idem_audit_events e WHERE e.org = x.org AND e.execution_id = x.id), '[]'::jsonb)
    FROM idem_executions x
    LEFT JOIN idem_attempts a ON a.org = x.org AND a.execution_id = x.id
    ORDER BY x.seq;

-- Attempt records whose execution is gone (the audit retention removed
-- it): the record keeps its key, with an execution of its own.
INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state, fencing_token,
        lease_expires_at, status, headers, body, sealed_key_id, completed_at, expires_at, secret_expires_at, watched,
        attempts, outcome, started_at, finished_at, events)
    SELECT a.org, a.execution_id, a.principal, a.operation, a.fingerprint, a.key, true, a.state, a.fencing_token,
        a.lease_expires_at, a.status, a.headers, a.body, a.sealed_key_id, a.completed_at, a.expires_at,
        a.secret_expires_at, a.watched, 1,
        CASE WHEN a.state = 'in_flight' OR a.state = 'indeterminate' THEN 'running'
            WHEN a.status < 400 THEN 'succeeded' ELSE 'failed' END,
        a.created_at, a.completed_at, '[]'::jsonb
    FROM idem_attempts a
    WHERE NOT EXISTS (SELECT FROM idem_executions x WHERE x.org = a.org AND x.id = a.execution_id);

-- A record of a key older than its newest (forgotten, left for the
-- sweeper) no longer holds it.
UPDATE idem_records r SET held = false, headers = NULL, body = NULL
WHERE r.held AND EXISTS (SELECT FROM idem_records n
    WHERE n.held AND n.org = r.org AND n.principal = r.principal AND n.key = r.key
        AND (n.started_at, n.seq) > (r.started_at, r.seq));

-- Every lookup by key.
CREATE UNIQUE INDEX idem_records_key ON idem_records (org, principal, key) WHERE held;

SELECT setval(pg_get_serial_sequence('idem_records', 'seq'),
    COALESCE((SELECT max(seq) FROM idem_records), 0) + 1, false);

DROP TABLE idem_attempts, idem_executions, idem_audit_events;

-- Events appended to an execution after its own statements (AppendEvents).
CREATE TABLE idem_audit_events (
    org                 text        NOT NULL,
    id                  bigint      GENERATED ALWAYS AS IDENTITY,
    execution_id        text        NOT NULL,
    -- How many of the record's events came before this one.
    pos                 integer     NOT NULL,
    type                text        NOT NULL,
    at                  timestamptz NOT NULL,
    attempt             integer,
    code                text,
    previous_error_code text,
    attempts            integer,
    duration_ms         bigint,
    data                jsonb,
    PRIMARY KEY (org, id)
);

CREATE INDEX idem_audit_events_execution ON idem_audit_events (org, execution_id, id);
-- The audit retention's scan.
CREATE INDEX idem_audit_events_at ON idem_audit_events (at);
