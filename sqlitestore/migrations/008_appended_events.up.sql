-- Events appended to an execution later (AppendEvents: a replay's
-- execution.replayed, from the audit queue) are rows of their own instead
-- of being appended to the record's events array, which rewrote the whole
-- row and a growing array at every replay. pos is how many of the record's
-- own events (its array) preceded the event when it was written; the rowid
-- is the order of writing. event is one idem.AuditEvent as in the array.
-- GetExecution places each after the first pos of the array. Records
-- written before keep their appended events in their array.
CREATE TABLE idem_audit_events (
	org          TEXT    NOT NULL,
	execution_id TEXT    NOT NULL,
	pos          INTEGER NOT NULL,
	event        TEXT    NOT NULL
) STRICT;

-- GetExecution: an execution's appended events in order (the rowid ends
-- every index entry); the sweeper: those of the executions it removes.
CREATE INDEX idem_audit_events_execution ON idem_audit_events (org, execution_id);
