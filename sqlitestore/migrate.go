package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/migrate"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT`

// Migrate applies the pending embedded migrations to db, each in one
// BEGIN IMMEDIATE transaction that first checks it is still pending, so
// running it twice, or from several processes at once, is harmless. Open
// calls it.
func Migrate(ctx context.Context, db *sql.DB) error {
	_, err := applyMigrations(ctx, db, idem.SystemClock{})
	return err
}

// applyMigrations is Migrate, returning the migrations it applied
// ("001_name"), none when the schema was up to date.
func applyMigrations(ctx context.Context, db *sql.DB, clock idem.Clock) ([]string, error) {
	all, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	if err := immediate(ctx, db, func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, createMigrationsTable)
		return err
	}); err != nil {
		return nil, fmt.Errorf("sqlitestore: migrate: create idem_schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	rows, err := db.QueryContext(ctx, `SELECT version FROM idem_schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("sqlitestore: migrate: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	rows.Close()

	var ran []string
	for _, m := range migrate.Pending(all, applied) {
		this := false
		err := immediate(ctx, db, func(conn *sql.Conn) error {
			var done bool
			err := conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM idem_schema_migrations WHERE version = ?)`, m.Version).Scan(&done)
			if err != nil || done {
				return err
			}
			if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err = conn.ExecContext(ctx, `INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, micros(clock.Now()))
			this = err == nil
			return err
		})
		if err != nil {
			return ran, fmt.Errorf("sqlitestore: migrate %s: %w", m.ID(), err)
		}
		if this {
			ran = append(ran, m.ID())
		}
	}
	return ran, nil
}

// immediate runs fn on one connection of db inside BEGIN IMMEDIATE, whatever
// transaction mode db's DSN sets.
func immediate(ctx context.Context, db *sql.DB, fn func(conn *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if err = fn(conn); err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		// Never hand back a connection that may still be inside the
		// transaction: drop it when ROLLBACK fails.
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	return err
}
