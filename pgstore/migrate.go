package pgstore

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem/internal/migrate"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrationLock is the pg_advisory_lock key that serialises Migrate across
// processes ("idem_mig" in ASCII).
const migrationLock int64 = 0x6964656d5f6d6967

// The statements of Migrate's bookkeeping (sql/migrate.sql).
var (
	migrationLockSQL     = section("migrate", "lock")
	migrationUnlockSQL   = section("migrate", "unlock")
	createMigrationsSQL  = section("migrate", "create_table")
	appliedMigrationsSQL = section("migrate", "applied")
	recordMigrationSQL   = section("migrate", "record")
)

// Migrate applies the pending embedded migrations, each in its own
// transaction recorded in idem_schema_migrations. Concurrent calls, from any
// process, wait for one another on an advisory lock; running it again is
// harmless.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := migrateApplied(ctx, pool)
	return err
}

// migrateApplied is Migrate, returning the migrations it applied
// ("001_name"), none when the schema was up to date.
func migrateApplied(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	all, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, interpretError(ctx, "migrate", err)
	}
	defer conn.Release()
	// The lock belongs to the session, so a connection that may still hold
	// it (the lock call failed mid-way, or the unlock failed) is closed
	// rather than returned to the pool.
	if _, err := conn.Exec(ctx, migrationLockSQL, migrationLock); err != nil {
		conn.Conn().Close(context.Background())
		return nil, interpretError(ctx, "migrate", err)
	}
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, migrationUnlockSQL, migrationLock); err != nil {
			conn.Conn().Close(unlockCtx)
		}
	}()
	applied, err := applyMigrations(ctx, conn.Conn(), all)
	if err != nil {
		return nil, interpretError(ctx, "migrate", err)
	}
	return applied, nil
}

// applyMigrations runs, on a connection holding the migration lock, the
// migrations not yet recorded.
func applyMigrations(ctx context.Context, conn *pgx.Conn, all []migrate.Migration) ([]string, error) {
	if _, err := conn.Exec(ctx, createMigrationsSQL); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, appliedMigrationsSQL)
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, err
	}
	applied := map[int]bool{}
	for _, v := range versions {
		applied[v] = true
	}
	var done []string
	for _, m := range migrate.Pending(all, applied) {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			// Bookkeeping, not domain time: the wall clock is right here.
			_, err := tx.Exec(ctx, recordMigrationSQL, m.Version, m.Name, time.Now())
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migration %s: %w", m.ID(), err)
		}
		done = append(done, m.ID())
	}
	return done, nil
}
