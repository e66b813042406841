-- The sweeper removes executions past the audit retention oldest first
-- (sweep.go), in bounded batches.
CREATE INDEX idem_executions_started_at ON idem_executions (started_at);
