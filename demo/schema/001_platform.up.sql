-- Platform tables of the reference application (SPEC §12): businesses,
-- backend bindings, webhooks and their deliveries, API tokens. Every
-- primary key starts with org; times are INTEGER unix microseconds. No
-- secret is stored in clear: webhook signing secrets are sealed (AES-256-GCM,
-- the server's key file), API tokens are kept as SHA-256 hashes only.

CREATE TABLE idem_demo_businesses (
	org        TEXT    NOT NULL,
	slug       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	created_by TEXT    NOT NULL,
	created_at BIGINT  NOT NULL,
	PRIMARY KEY (org, slug)
);

-- One row per (business, name, environment): the identity backend.bind
-- converges on.
CREATE TABLE idem_demo_backends (
	org         TEXT    NOT NULL,
	business    TEXT    NOT NULL,
	name        TEXT    NOT NULL,
	environment TEXT    NOT NULL,
	origin_url  TEXT    NOT NULL,
	created_at  BIGINT  NOT NULL,
	updated_at  BIGINT  NOT NULL,
	updated_by  TEXT    NOT NULL,
	PRIMARY KEY (org, business, name, environment)
);

-- secret_sealed is the base64 of the sealed signing secret, secret_key_id
-- the id of the key that sealed it (for rotation); events a JSON array.
CREATE TABLE idem_demo_webhooks (
	org           TEXT    NOT NULL,
	id            TEXT    NOT NULL,
	business      TEXT    NOT NULL,
	url           TEXT    NOT NULL,
	events        TEXT    NOT NULL,
	secret_sealed TEXT    NOT NULL,
	secret_key_id TEXT    NOT NULL,
	created_by    TEXT    NOT NULL,
	created_at    BIGINT  NOT NULL,
	PRIMARY KEY (org, id)
);
CREATE INDEX idem_demo_webhooks_business ON idem_demo_webhooks (org, business, created_at);

-- A delivery is written (outcome 'sending') before the request goes out and
-- completed with its outcome ('delivered' or 'failed') after: a row left
-- 'sending' is an attempt whose result nobody recorded.
CREATE TABLE idem_demo_webhook_deliveries (
	org             TEXT    NOT NULL,
	id              TEXT    NOT NULL,
	webhook         TEXT    NOT NULL,
	type            TEXT    NOT NULL,
	url             TEXT    NOT NULL,
	outcome         TEXT    NOT NULL,
	response_status INTEGER,
	error           TEXT,
	attempted_at    BIGINT  NOT NULL,
	duration_ms     INTEGER NOT NULL,
	execution_id    TEXT    NOT NULL,
	PRIMARY KEY (org, id)
);
CREATE INDEX idem_demo_webhook_deliveries_webhook ON idem_demo_webhook_deliveries (org, webhook, attempted_at);

-- secret_sha256 is the hex SHA-256 of the token; the token itself is shown
-- once (and replayed, sealed, by the idem store within its window).
CREATE TABLE idem_demo_tokens (
	org           TEXT    NOT NULL,
	id            TEXT    NOT NULL,
	name          TEXT    NOT NULL,
	scopes        TEXT    NOT NULL,
	secret_sha256 TEXT    NOT NULL,
	created_by    TEXT    NOT NULL,
	created_at    BIGINT  NOT NULL,
	PRIMARY KEY (org, id)
);
CREATE UNIQUE INDEX idem_demo_tokens_hash ON idem_demo_tokens (secret_sha256);
