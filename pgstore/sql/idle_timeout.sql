-- Bounds how long the rest of the transaction may sit idle, its client
-- sending nothing, before PostgreSQL ends it, as SET LOCAL
-- idle_in_transaction_session_timeout does (Transact, CheckFence). $1
-- the timeout in milliseconds, as in "10000ms" or "10000".
SELECT set_config('idle_in_transaction_session_timeout', $1, true)
