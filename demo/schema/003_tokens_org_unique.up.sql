-- A token's hash is unique within its org: every unique constraint of an org
-- table carries org, so the table can be distributed on org (docs/SCALE.md).
DROP INDEX IF EXISTS idem_demo_tokens_hash;
CREATE UNIQUE INDEX IF NOT EXISTS idem_demo_tokens_org_hash ON idem_demo_tokens (org, secret_sha256);
