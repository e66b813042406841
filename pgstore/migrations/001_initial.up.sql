-- The idem schema: attempt records, approvals, executions and their audit
-- events. Every org-scoped table leads its primary key with org, so that the
-- tables can later be sharded by org. Times are timestamptz (microseconds)
-- and always come from the application's clock, never from now().

CREATE SEQUENCE idem_fencing_tokens;

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
    PRIMARY KEY (org, principal, key)
);

-- The sweeper's three scans.
CREATE INDEX idem_attempts_expires_at ON idem_attempts (expires_at);
CREATE INDEX idem_attempts_lease ON idem_attempts (lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX idem_attempts_secret ON idem_attempts (secret_expires_at) WHERE body IS NOT NULL AND secret_expires_at IS NOT NULL;

CREATE TABLE idem_approvals (
    org             text        NOT NULL,
    id              text        NOT NULL,
    requested_by    text        NOT NULL,
    operation       text        NOT NULL,
    fingerprint     text        NOT NULL,
    -- json, not jsonb: the input is shown to approvers exactly as sent.
    input           json,
    reason          text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'consumed', 'expired')),
    decided_by      text,
    decision_reason text,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    decided_at      timestamptz,
    consumed_at     timestamptz,
    execution_id    text,
    -- Insertion order: breaks ties between equal created_at.
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (org, id)
);

CREATE INDEX idem_approvals_intent ON idem_approvals (org, requested_by, operation, fingerprint, created_at DESC, seq DESC);
CREATE INDEX idem_approvals_list ON idem_approvals (org, created_at DESC, seq DESC);
CREATE INDEX idem_approvals_expiry ON idem_approvals (expires_at) WHERE status IN ('pending', 'approved');

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
    PRIMARY KEY (org, id)
);

CREATE INDEX idem_executions_intent ON idem_executions (org, principal, operation, fingerprint, started_at DESC, seq DESC);

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
    PRIMARY KEY (org, id)
);

CREATE INDEX idem_audit_events_execution ON idem_audit_events (org, execution_id, id);
