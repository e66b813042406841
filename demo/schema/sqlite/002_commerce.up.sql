-- Commerce tables: filled in by the commerce operations.
CREATE TABLE IF NOT EXISTS idem_demo_placeholder_commerce (org TEXT NOT NULL, PRIMARY KEY (org));
