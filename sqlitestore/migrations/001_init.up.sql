-- Fencing tokens come from one counter, so a token is never reused, not even
-- by a record that replaces a forgotten one.
CREATE TABLE idem_counters (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) STRICT;

INSERT INTO idem_counters (name, value) VALUES ('fencing_token', 0);

-- Times are unix microseconds, UTC.
CREATE TABLE idem_attempts (
	org               TEXT    NOT NULL,
	principal         TEXT    NOT NULL,
	key               TEXT    NOT NULL,
	operation         TEXT    NOT NULL,
	fingerprint       TEXT    NOT NULL,
	state             TEXT    NOT NULL CHECK (state IN ('in_flight', 'completed', 'indeterminate', 'expired')),
	execution_id      TEXT    NOT NULL,
	fencing_token     INTEGER NOT NULL,
	lease_expires_at  INTEGER NOT NULL,
	status            INTEGER,
	headers           TEXT,
	body              BLOB,
	sealed_key_id     TEXT,
	created_at        INTEGER NOT NULL,
	completed_at      INTEGER,
	expires_at        INTEGER NOT NULL,
	secret_expires_at INTEGER,
	PRIMARY KEY (org, principal, key)
) STRICT;

CREATE INDEX idem_attempts_expires_at ON idem_attempts (expires_at);
CREATE INDEX idem_attempts_lease_expires_at ON idem_attempts (lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX idem_attempts_secret_expires_at ON idem_attempts (secret_expires_at) WHERE body IS NOT NULL;

CREATE TABLE idem_executions (
	org             TEXT    NOT NULL,
	id              TEXT    NOT NULL,
	principal       TEXT    NOT NULL,
	operation       TEXT    NOT NULL,
	fingerprint     TEXT    NOT NULL,
	key             TEXT,
	attempts        INTEGER NOT NULL,
	outcome         TEXT    NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed')),
	code            TEXT,
	reinvocation_of TEXT,
	started_at      INTEGER NOT NULL,
	finished_at     INTEGER,
	PRIMARY KEY (org, id)
) STRICT;

CREATE INDEX idem_executions_intent ON idem_executions (org, principal, operation, fingerprint, started_at);

CREATE TABLE idem_audit_events (
	id                  INTEGER PRIMARY KEY AUTOINCREMENT,
	org                 TEXT    NOT NULL,
	execution_id        TEXT    NOT NULL,
	type                TEXT    NOT NULL,
	at                  INTEGER NOT NULL,
	attempt             INTEGER,
	code                TEXT,
	previous_error_code TEXT,
	attempts            INTEGER,
	duration_ms         INTEGER,
	data                TEXT,
	FOREIGN KEY (org, execution_id) REFERENCES idem_executions (org, id)
) STRICT;

CREATE INDEX idem_audit_events_execution ON idem_audit_events (org, execution_id, id);

CREATE TABLE idem_approvals (
	org             TEXT    NOT NULL,
	id              TEXT    NOT NULL,
	requested_by    TEXT    NOT NULL,
	operation       TEXT    NOT NULL,
	fingerprint     TEXT    NOT NULL,
	input           TEXT,
	reason          TEXT    NOT NULL,
	status          TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'consumed', 'expired')),
	decided_by      TEXT,
	decision_reason TEXT,
	created_at      INTEGER NOT NULL,
	expires_at      INTEGER NOT NULL,
	decided_at      INTEGER,
	consumed_at     INTEGER,
	execution_id    TEXT,
	PRIMARY KEY (org, id)
) STRICT;

CREATE INDEX idem_approvals_intent ON idem_approvals (org, requested_by, operation, fingerprint, created_at);
CREATE INDEX idem_approvals_org_created_at ON idem_approvals (org, created_at);
CREATE INDEX idem_approvals_open_expires_at ON idem_approvals (expires_at) WHERE status IN ('pending', 'approved');
