package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the driver the SQLite store uses
)

// The raw limit: the naive reserve+complete loop run by the harness itself
// on the same database with the same durability settings. Each client
// repeats: one transaction INSERTs an in_flight row into a scratch table
// shaped like the store's records (same columns, primary key and indexes), then
// one transaction UPDATEs it to completed with a small body. One "request"
// is one such pair.

// rawBody is the stored answer of the raw loop, the size of a small envelope.
var rawBody = []byte(`{"data":{"slug":"raw-0000","name":"bench","createdBy":"agent-1","createdAt":"2026-01-01T00:00:00.000000Z"},"meta":{"operation":"business.create","executionId":"exe_raw00000000000000000000000","attempts":1,"idempotency":{"key":"raw","replayed":false}}}`)

const rawHeaders = `{"Content-Type":["application/json"],"Location":["/v1/businesses/raw"]}`

// sqliteDSN opens path with the SQLite store's own pragmas (WAL,
// synchronous=FULL, busy timeout) and BEGIN IMMEDIATE transactions.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_txlock=immediate"
}

// rawSQLite runs the raw loop on the SQLite file at path through one
// connection, as the store's single writer does, shared by clients callers.
func rawSQLite(ctx context.Context, path string, clients int, d time.Duration) (phase, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return phase{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ddl := []string{
		`DROP TABLE IF EXISTS bench_raw_attempts`,
		`CREATE TABLE bench_raw_attempts (
			org TEXT NOT NULL, principal TEXT NOT NULL, key TEXT NOT NULL, operation TEXT NOT NULL,
			fingerprint TEXT NOT NULL,
			state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed', 'indeterminate', 'expired')),
			execution_id TEXT NOT NULL, fencing_token INTEGER NOT NULL, lease_expires_at INTEGER NOT NULL,
			status INTEGER, headers TEXT, body BLOB, sealed_key_id TEXT, created_at INTEGER NOT NULL,
			completed_at INTEGER, expires_at INTEGER NOT NULL, secret_expires_at INTEGER,
			PRIMARY KEY (org, principal, key)) STRICT`,
		`CREATE INDEX bench_raw_expires_at ON bench_raw_attempts (expires_at)`,
		`CREATE INDEX bench_raw_lease ON bench_raw_attempts (lease_expires_at) WHERE state = 'in_flight'`,
		`CREATE INDEX bench_raw_secret ON bench_raw_attempts (secret_expires_at) WHERE body IS NOT NULL`,
	}
	for _, q := range ddl {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return phase{}, fmt.Errorf("raw loop: %w", err)
		}
	}
	defer db.ExecContext(context.Background(), `DROP TABLE IF EXISTS bench_raw_attempts`)
	p := drive(ctx, "sqlite raw limit", clients, d, func(ctx context.Context, w, i int) error {
		now := time.Now().UnixMicro()
		key := fmt.Sprintf("raw-%d-%d", w, i)
		if _, err := db.ExecContext(ctx, `INSERT INTO bench_raw_attempts (org, principal, key, operation, fingerprint, state, execution_id, fencing_token, lease_expires_at, created_at, expires_at)
			VALUES ('acme', 'agent-1', ?, 'business.create', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'in_flight', ?, ?, ?, ?, ?)`,
			key, "exe_"+key, int64(w)<<32|int64(i), now+35_000_000, now, now+86_400_000_000); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, `UPDATE bench_raw_attempts SET state = 'completed', status = 201, headers = ?, body = ?, completed_at = ?
			WHERE org = 'acme' AND principal = 'agent-1' AND key = ?`, rawHeaders, rawBody, time.Now().UnixMicro(), key)
		return err
	})
	return p, nil
}

// rawPostgres runs the raw loop on the database of dbURL with clients
// connections, each statement its own (autocommit) transaction.
func rawPostgres(ctx context.Context, dbURL string, clients int, d time.Duration) (phase, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return phase{}, err
	}
	cfg.MaxConns = int32(clients)
	cfg.MinConns = int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return phase{}, err
	}
	defer pool.Close()
	for _, q := range []string{
		`DROP TABLE IF EXISTS bench_raw_attempts`,
		`CREATE TABLE bench_raw_attempts (LIKE idem_records INCLUDING ALL)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return phase{}, fmt.Errorf("raw loop: %w", err)
		}
	}
	defer pool.Exec(context.Background(), `DROP TABLE IF EXISTS bench_raw_attempts`)
	p := drive(ctx, "postgres raw limit", clients, d, func(ctx context.Context, w, i int) error {
		now := time.Now().UTC()
		key := fmt.Sprintf("raw-%d-%d", w, i)
		if _, err := pool.Exec(ctx, `INSERT INTO bench_raw_attempts (org, id, principal, key, operation, fingerprint, held, state, fencing_token,
				lease_expires_at, started_at, expires_at, attempts, outcome, events)
			VALUES ('acme', $2, 'agent-1', $1, 'business.create', 'sha256:0000000000000000000000000000000000000000000000000000000000000000',
				true, 'in_flight', $3, $4, $5, $6, 1, 'running', '[]')`,
			key, "exe_"+key, int64(w)<<32|int64(i), now.Add(35*time.Second), now, now.Add(24*time.Hour)); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `UPDATE bench_raw_attempts SET state = 'completed', status = 201, headers = $1, body = $2, completed_at = $3,
				outcome = 'succeeded', finished_at = $3
			WHERE org = 'acme' AND principal = 'agent-1' AND key = $4 AND held`, rawHeaders, rawBody, time.Now().UTC(), key)
		return err
	})
	return p, nil
}

// sqliteSize returns the SQLite database's logical size (page_count ×
// page_size, which counts pages still in the WAL) and how many of its
// records hold a key.
func sqliteSize(ctx context.Context, path string) (size, rows int64, err error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	var pages, pageSize int64
	if err := db.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		return 0, 0, err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		return 0, 0, err
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM idem_records WHERE held = 1`).Scan(&rows); err != nil {
		return 0, 0, err
	}
	return pages * pageSize, rows, nil
}

// pgSize returns the total size of idem_records (table, TOAST and indexes)
// and how many of its records hold a key.
func pgSize(ctx context.Context, dbURL string) (size, rows int64, err error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, 0, err
	}
	// The count reads an index, so that the harness adds no sequential
	// scan to the phases' counts (counts.go).
	cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	err = pool.QueryRow(ctx, `SELECT pg_total_relation_size('idem_records'), (SELECT count(*) FROM idem_records WHERE held)`).Scan(&size, &rows)
	return size, rows, err
}

// prefillSQLite adds n completed attempt records (keys prefill-1…n, the
// bench's org and principal, a small body) to the SQLite store at path, in
// one statement, so that the phases run against a store that already
// retains n keys.
func prefillSQLite(ctx context.Context, path string, n int) error {
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return err
	}
	defer db.Close()
	now := time.Now().UnixMicro()
	_, err = db.ExecContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?)
		INSERT INTO idem_records (org, id, principal, key, operation, fingerprint, held, state, fencing_token,
			lease_expires_at, status, headers, body, started_at, completed_at, expires_at, attempts, outcome, finished_at, events)
		SELECT 'acme', 'exe_prefill' || x, 'agent-1', 'prefill-' || x, 'business.create', 'sha256:' || lower(hex(randomblob(32))),
			1, 'completed', -x, ?, 201, ?, ?, ?, ?, ?, 1, 'succeeded', ?, '[]'
		FROM c`, n, now+35_000_000, rawHeaders, rawBody, now, now, now+86_400_000_000, now)
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	return nil
}

// prefillPostgres is prefillSQLite on the PostgreSQL store at dbURL.
func prefillPostgres(ctx context.Context, dbURL string, n int) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	now := time.Now().UTC()
	if _, err := pool.Exec(ctx, `INSERT INTO idem_records (org, id, principal, key, operation, fingerprint, held, state, fencing_token,
			lease_expires_at, status, headers, body, started_at, completed_at, expires_at, attempts, outcome, finished_at, events)
		SELECT 'acme', 'exe_prefill' || x, 'agent-1', 'prefill-' || x, 'business.create', 'sha256:' || md5(x::text) || md5((-x)::text),
			true, 'completed', -x, $1, 201, $2::jsonb, $3, $4, $4, $5, 1, 'succeeded', $4, '[]'
		FROM generate_series(1, $6::int) AS x`, now.Add(35*time.Second), rawHeaders, rawBody, now, now.Add(24*time.Hour), n); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	_, err = pool.Exec(ctx, `VACUUM ANALYZE idem_records`)
	return err
}
