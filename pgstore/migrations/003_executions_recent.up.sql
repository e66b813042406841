-- ListExecutions reads an org's executions newest first.
CREATE INDEX IF NOT EXISTS idem_executions_recent ON idem_executions (org, started_at DESC, seq DESC);
