-- Cost must not grow with the data (docs/demo.md, "Bounds"). An order keeps
-- its refunded total and its number of refunds, so a refund reads one order
-- row and a bounded number of its newest refunds instead of all of them;
-- both are backfilled from the refunds made so far.
ALTER TABLE idem_demo_orders ADD COLUMN refunded BIGINT NOT NULL DEFAULT 0;
ALTER TABLE idem_demo_orders ADD COLUMN refund_count BIGINT NOT NULL DEFAULT 0;
UPDATE idem_demo_orders SET
	refunded = (SELECT COALESCE(SUM(r.amount), 0) FROM idem_demo_refunds r
		WHERE r.org = idem_demo_orders.org AND r.order_id = idem_demo_orders.id),
	refund_count = (SELECT COUNT(*) FROM idem_demo_refunds r
		WHERE r.org = idem_demo_orders.org AND r.order_id = idem_demo_orders.id)
WHERE EXISTS (SELECT 1 FROM idem_demo_refunds r
	WHERE r.org = idem_demo_orders.org AND r.order_id = idem_demo_orders.id);

-- Every list reads one page as one index range in its order: each index
-- ends in the list's whole sort key (the time, then the id that breaks
-- ties), so neither engine sorts or scans past the page.
DROP INDEX IF EXISTS idem_demo_refunds_order;
CREATE INDEX IF NOT EXISTS idem_demo_refunds_order ON idem_demo_refunds (org, order_id, created_at, id);
DROP INDEX IF EXISTS idem_demo_webhooks_business;
CREATE INDEX IF NOT EXISTS idem_demo_webhooks_business ON idem_demo_webhooks (org, business, created_at, id);
DROP INDEX IF EXISTS idem_demo_webhook_deliveries_webhook;
CREATE INDEX IF NOT EXISTS idem_demo_webhook_deliveries_webhook ON idem_demo_webhook_deliveries (org, webhook, attempted_at, id);
CREATE INDEX IF NOT EXISTS idem_demo_tokens_created ON idem_demo_tokens (org, created_at, id);
CREATE INDEX IF NOT EXISTS idem_demo_limits_subscription ON idem_demo_limits (org, subscription_id, created_at, id);
DROP INDEX IF EXISTS idem_demo_agreements_business;
CREATE INDEX IF NOT EXISTS idem_demo_agreements_business ON idem_demo_agreements (org, business_slug, created_at, id);
DROP INDEX IF EXISTS idem_demo_gateway_effects_created;
CREATE INDEX IF NOT EXISTS idem_demo_gateway_effects_created ON idem_demo_gateway_effects (org, created_at, handler_key);
