-- One row per execution, keyed or not (issue 25): the attempt record of its
-- key, the execution and its audit events, in place of idem_attempts,
-- idem_executions and idem_audit_events. A first execution writes one row
-- (and its indexes) instead of four or more; its completion updates it once.
-- Times are unix microseconds, UTC.
CREATE TABLE idem_records (
	org               TEXT    NOT NULL,
	id                TEXT    NOT NULL, -- the execution's id
	principal         TEXT    NOT NULL,
	operation         TEXT    NOT NULL,
	fingerprint       TEXT    NOT NULL,
	key               TEXT,             -- NULL for an unkeyed execution
	-- 1 while the row holds its key: keyed, neither forgotten nor released.
	held              INTEGER NOT NULL CHECK (held IN (0, 1) AND (held = 0 OR key IS NOT NULL)),
	-- The attempt record (NULL for an unkeyed execution; fencing_token
	-- NULL too for a record written final by Transact, never in flight).
	state             TEXT    CHECK (state IN ('in_flight', 'completed', 'indeterminate', 'expired')),
	fencing_token     INTEGER,
	lease_expires_at  INTEGER,
	status            INTEGER,
	sealed_key_id     TEXT,
	completed_at      INTEGER,
	expires_at        INTEGER,
	secret_expires_at INTEGER,
	-- The execution; started_at is the attempt record's creation too.
	attempts          INTEGER NOT NULL,
	outcome           TEXT    NOT NULL CHECK (outcome IN ('running', 'succeeded', 'failed')),
	code              TEXT,
	reinvocation_of   TEXT,
	started_at        INTEGER NOT NULL,
	finished_at       INTEGER,
	-- Last, so that reading the columns above stops short of them: the
	-- replayed headers (JSON), the audit events (a JSON array of
	-- idem.AuditEvent, in order) and the stored body.
	headers           TEXT,
	events            TEXT    NOT NULL,
	body              BLOB,
	PRIMARY KEY (org, id)
) STRICT;

-- Every lookup by key (GetAttempt, Reserve, Complete, Release, LeaseLeft,
-- CheckFence, RequestApproval), and what keeps one record per key.
CREATE UNIQUE INDEX idem_records_key ON idem_records (org, principal, key) WHERE held = 1;
-- reinvocationOf: the most recent execution of an intent, at every start.
CREATE INDEX idem_records_intent ON idem_records (org, principal, operation, fingerprint, started_at);
-- ListExecutions: an org's executions newest first.
CREATE INDEX idem_records_recent ON idem_records (org, started_at);
-- The sweeper's steps, each partial so that it holds only the rows the step
-- may touch: records to forget (keyed ones; entered at the reservation),
-- leases to expire (entered at the reservation, left at the completion),
-- secrets to destroy (sealed results only), and executions past the audit
-- retention (entered when the row stops holding its key, or at the start of
-- an unkeyed execution).
CREATE INDEX idem_records_expires_at ON idem_records (expires_at) WHERE held = 1;
CREATE INDEX idem_records_lease_expires_at ON idem_records (lease_expires_at) WHERE state = 'in_flight' AND held = 1;
CREATE INDEX idem_records_secret_expires_at ON idem_records (secret_expires_at)
	WHERE secret_expires_at IS NOT NULL AND body IS NOT NULL;
CREATE INDEX idem_records_released ON idem_records (started_at) WHERE held = 0;

-- Each execution with its attempt record (if its key still has one) and its
-- events in order, keeping the executions' order of insertion (rowid, the
-- tie-break of "newest first").
INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held,
	state, fencing_token, lease_expires_at, status, sealed_key_id, completed_at, expires_at, secret_expires_at,
	attempts, outcome, code, reinvocation_of, started_at, finished_at, headers, events, body)
SELECT e.org, e.id, COALESCE(a.principal, e.principal), e.operation, e.fingerprint, COALESCE(a.key, e.key), a.key IS NOT NULL,
	a.state, a.fencing_token, a.lease_expires_at, a.status, a.sealed_key_id, a.completed_at, a.expires_at, a.secret_expires_at,
	e.attempts, e.outcome, e.code, e.reinvocation_of, e.started_at, e.finished_at, a.headers,
	(SELECT json_group_array(json_patch('{}', json_object(
			'type', v.type,
			'at', strftime('%Y-%m-%dT%H:%M:%S', v.at / 1000000, 'unixepoch') || printf('.%06dZ', v.at % 1000000),
			'attempt', v.attempt,
			'code', v.code,
			'previousErrorCode', v.previous_error_code,
			'attempts', v.attempts,
			'durationMs', v.duration_ms,
			'data', json(v.data))) ORDER BY v.id)
		FROM idem_audit_events v WHERE v.org = e.org AND v.execution_id = e.id),
	a.body
FROM idem_executions e
LEFT JOIN idem_attempts a ON a.org = e.org AND a.execution_id = e.id
ORDER BY e.rowid;

-- An attempt record whose execution is gone keeps its key: it gets an
-- execution made from what the record knows, with no events.
INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held,
	state, fencing_token, lease_expires_at, status, sealed_key_id, completed_at, expires_at, secret_expires_at,
	attempts, outcome, code, reinvocation_of, started_at, finished_at, headers, events, body)
SELECT a.org, a.execution_id, a.principal, a.operation, a.fingerprint, a.key, 1,
	a.state, a.fencing_token, a.lease_expires_at, a.status, a.sealed_key_id, a.completed_at, a.expires_at, a.secret_expires_at,
	1,
	CASE WHEN a.state = 'in_flight' THEN 'running'
		WHEN a.state IN ('completed', 'expired') AND a.status < 400 THEN 'succeeded'
		ELSE 'failed' END,
	NULL, NULL, a.created_at, a.completed_at, a.headers, '[]', a.body
FROM idem_attempts a
WHERE NOT EXISTS (SELECT 1 FROM idem_executions e WHERE e.org = a.org AND e.id = a.execution_id)
ORDER BY a.created_at, a.rowid;

-- Events reference their execution: they go first. Dropping idem_attempts
-- drops its trigger (migration 004) too.
DROP TABLE idem_audit_events;
DROP TABLE idem_executions;
DROP TABLE idem_attempts;

-- A reservation's INSERT takes its fencing token from the counter (its value
-- + 1, read in the same statement under the write lock) and this trigger
-- advances the counter to it, as migration 004 did for idem_attempts. A
-- record Transact writes final has no token and leaves the counter alone.
CREATE TRIGGER idem_records_fencing_token AFTER INSERT ON idem_records
WHEN NEW.fencing_token IS NOT NULL
BEGIN
	UPDATE idem_counters SET value = NEW.fencing_token
	WHERE name = 'fencing_token' AND value < NEW.fencing_token;
END;
