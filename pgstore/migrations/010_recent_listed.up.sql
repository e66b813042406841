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
-- Each of these indexes becomes partial on an always-true predicate of
-- seq (an identity from 1) that only its own statements state: "seq > 0"
-- for the lists (list_executions, list_approvals), "seq <> 0" for the
-- intents (reinvocation_of, get_live_approval). The planner takes a
-- partial index only for a statement whose WHERE implies its predicate,
-- and "seq <> 0" does not imply "seq > 0": a lookup by (org, id) can take
-- only the primary key, a lookup of an intent only the intent's index,
-- whatever the statistics say.
DROP INDEX idem_records_recent, idem_records_intent, idem_approvals_list, idem_approvals_intent;
CREATE INDEX idem_records_intent ON idem_records (org, principal, operation, fingerprint, started_at DESC, seq DESC)
    WHERE seq <> 0;
CREATE INDEX idem_records_recent ON idem_records (org, started_at DESC, seq DESC) WHERE seq > 0;
CREATE INDEX idem_approvals_intent ON idem_approvals (org, requested_by, operation, fingerprint, created_at DESC, seq DESC)
    WHERE seq <> 0;
CREATE INDEX idem_approvals_list ON idem_approvals (org, created_at DESC, seq DESC) WHERE seq > 0;
