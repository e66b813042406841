-- Makes complete_set.sql run on its generic plan, made once per
-- connection (pgx prepares the statement). Left to choose, PostgreSQL
-- would plan it afresh on every call, since a custom plan, which sees the
-- arrays' lengths, always looks cheaper than the generic one (which
-- guesses 100 rows), and planning the partitions of three tables costs
-- more than running the statement. SET LOCAL ends with the transaction.
SET LOCAL plan_cache_mode = force_generic_plan
