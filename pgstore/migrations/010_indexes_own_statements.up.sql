-- Plans that cannot take the wrong index (issue 36): each index of
-- idem_records and idem_approvals that leads with the org but is not the
-- primary key serves its own statements, and no other.
--
-- On an empty, never analyzed table every index of the org costs the same
-- to the planner, and the generic plan a connection makes then
-- (plan_cache_mode = force_generic_plan) is kept for the connection's
-- life. Plans made on a fresh store took the list's index (the org's
-- records newest first) for the newest execution of an intent
-- ("reinvocation_of", in every insert of a record), and the intent's or
-- the list's index for lookups by (org, id) (get_execution,
-- finish_execution, the sweeper's joins, get_approval): an index probed by
-- the org alone and the rest filtered, so that each call read every
-- earlier record of its org, a cost that grew with the store (PostgreSQL
-- first executions 1,500 -> 450/s within seconds of a fresh start, in
-- `bench --quick`).
--
-- Each of these indexes becomes partial: the planner takes a partial
-- index only for a statement whose WHERE implies its predicate.
--   - The lists' indexes, on "seq > 0", always true (seq is an identity
--     from 1), which only list_executions and list_approvals state.
--   - The intents' indexes, on "fingerprint IS NOT NULL", always true
--     (the column is NOT NULL), which every lookup of an intent implies
--     by its "fingerprint = ..." (an equality is never true of a NULL),
--     this release's statements and the previous release's alike, so that
--     an instance of the previous release keeps its plans during a rolling
--     upgrade; a lookup by (org, id) names no fingerprint.
-- So a lookup by (org, id) can take only the primary key, a lookup of an
-- intent only the intent's index, whatever the statistics say. (The
-- previous release's lists name no "seq > 0": until it is replaced, its
-- list_executions and list_approvals sort the org's rows.)
DROP INDEX idem_records_recent, idem_records_intent, idem_approvals_list, idem_approvals_intent;
CREATE INDEX idem_records_intent ON idem_records (org, principal, operation, fingerprint, started_at DESC, seq DESC)
    WHERE fingerprint IS NOT NULL;
CREATE INDEX idem_records_recent ON idem_records (org, started_at DESC, seq DESC) WHERE seq > 0;
CREATE INDEX idem_approvals_intent ON idem_approvals (org, requested_by, operation, fingerprint, created_at DESC, seq DESC)
    WHERE fingerprint IS NOT NULL;
CREATE INDEX idem_approvals_list ON idem_approvals (org, created_at DESC, seq DESC) WHERE seq > 0;
