-- Bounds every lock wait of the rest of the transaction, as SET LOCAL
-- lock_timeout does (settleLease, partition changes). $1 the timeout, as
-- in "100ms".
SELECT set_config('lock_timeout', $1, true)
