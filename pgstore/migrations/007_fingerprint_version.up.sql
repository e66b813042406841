-- The version of each record's fingerprint preimage (issue 33 item 5,
-- SPEC §6.2): a retry is judged by the version its record was made with,
-- so that a record made before an upgrade that changed the preimage keeps
-- replaying. NULL is a record made before versions were stored (by a
-- release that wrote version 1 or 2, canonical's documentation), and what
-- an instance of such a release still writes during a rolling upgrade:
-- hence no default. Adding a nullable column without a default rewrites
-- nothing (a catalog change only), whatever the table's size.
ALTER TABLE idem_records ADD COLUMN fingerprint_version smallint;
