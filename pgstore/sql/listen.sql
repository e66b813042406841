-- The completion feed's connection: listens on idem_completed
-- (completedChannel), which complete_attempt.sql, complete_set.sql and
-- release.sql signal.
LISTEN idem_completed
