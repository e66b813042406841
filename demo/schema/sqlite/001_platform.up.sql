-- Platform tables: filled in by the platform operations.
CREATE TABLE IF NOT EXISTS idem_demo_placeholder_platform (org TEXT NOT NULL, PRIMARY KEY (org));
