-- The version of each record's fingerprint preimage (issue 33 item 5,
-- SPEC §6.2): a retry is judged by the version its record was made with.
-- NULL is a record made before versions were stored (version 1 or 2,
-- canonical's documentation), and what a process of such a release still
-- writes to the shared file during an upgrade: hence no default.
ALTER TABLE idem_records ADD COLUMN fingerprint_version INTEGER;
