-- ListExecutions reads an org's executions newest first.
CREATE INDEX idem_executions_recent ON idem_executions (org, started_at DESC);
