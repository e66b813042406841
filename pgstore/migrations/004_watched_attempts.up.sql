-- A record some other instance's Prefer: wait caller is waiting on: its
-- completion signals NOTIFY idem_completed (pgstore/feed.go). Only watched
-- records pay for the NOTIFY, whose commit PostgreSQL serialises
-- cluster-wide.
ALTER TABLE idem_attempts ADD COLUMN watched boolean NOT NULL DEFAULT false;
