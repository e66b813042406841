-- Commerce tables of the reference application (SPEC §12): orders and their
-- refunds, the payment gateway simulator's ledger, usage limits, service
-- accounts and agreements. Every primary key starts with org; times are
-- unix microseconds.

CREATE TABLE IF NOT EXISTS idem_demo_orders (
	org        TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	amount     BIGINT  NOT NULL,
	created_at BIGINT  NOT NULL,
	PRIMARY KEY (org, id)
);

CREATE TABLE IF NOT EXISTS idem_demo_refunds (
	org          TEXT    NOT NULL,
	id           TEXT    NOT NULL,
	order_id     TEXT    NOT NULL,
	amount       BIGINT  NOT NULL,
	gateway_key  TEXT    NOT NULL,
	execution_id TEXT    NOT NULL,
	principal    TEXT    NOT NULL,
	created_at   BIGINT  NOT NULL,
	PRIMARY KEY (org, id),
	UNIQUE (org, gateway_key)
);
CREATE INDEX IF NOT EXISTS idem_demo_refunds_order ON idem_demo_refunds (org, order_id, created_at);

-- The payment gateway simulator's ledger: one row per key it received.
CREATE TABLE IF NOT EXISTS idem_demo_gateway_effects (
	org           TEXT    NOT NULL,
	handler_key   TEXT    NOT NULL,
	principal     TEXT    NOT NULL,
	request_key   TEXT,
	order_id      TEXT    NOT NULL,
	amount        BIGINT  NOT NULL,
	calls         BIGINT  NOT NULL,
	applied       BOOLEAN NOT NULL,
	execution_ids TEXT    NOT NULL, -- JSON array of strings, in call order
	created_at    BIGINT  NOT NULL,
	updated_at    BIGINT  NOT NULL,
	PRIMARY KEY (org, handler_key)
);
CREATE INDEX IF NOT EXISTS idem_demo_gateway_effects_created ON idem_demo_gateway_effects (org, created_at);

CREATE TABLE IF NOT EXISTS idem_demo_subscriptions (
	org        TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	created_at BIGINT  NOT NULL,
	PRIMARY KEY (org, id)
);

-- A usage limit's identity is (subscription, subject); version counts
-- changes (1 = never updated since creation).
CREATE TABLE IF NOT EXISTS idem_demo_limits (
	org             TEXT    NOT NULL,
	id              TEXT    NOT NULL,
	subscription_id TEXT    NOT NULL,
	subject         TEXT    NOT NULL,
	quantity        BIGINT  NOT NULL,
	version         BIGINT  NOT NULL,
	created_at      BIGINT  NOT NULL,
	updated_at      BIGINT  NOT NULL,
	PRIMARY KEY (org, id),
	UNIQUE (org, subscription_id, subject)
);

CREATE TABLE IF NOT EXISTS idem_demo_service_accounts (
	org         TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	name        TEXT    NOT NULL,
	status      TEXT    NOT NULL, -- pending_approval | approved
	approved_by TEXT,
	approved_at BIGINT,
	created_at  BIGINT  NOT NULL,
	PRIMARY KEY (org, id)
);

CREATE TABLE IF NOT EXISTS idem_demo_agreements (
	org           TEXT    NOT NULL,
	id            TEXT    NOT NULL,
	business_slug TEXT    NOT NULL,
	plan          TEXT    NOT NULL,
	seats         BIGINT  NOT NULL,
	unit_amount   BIGINT  NOT NULL,
	total_amount  BIGINT  NOT NULL,
	created_by    TEXT    NOT NULL,
	created_at    BIGINT  NOT NULL,
	PRIMARY KEY (org, id)
);
CREATE INDEX IF NOT EXISTS idem_demo_agreements_business ON idem_demo_agreements (org, business_slug, created_at);
