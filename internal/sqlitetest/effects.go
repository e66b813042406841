package sqlitetest

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/idem-run/idem/storetest"
)

// Effect writes an effect called name through tx (a *sql.Tx on the
// database) into the table storetest_effects, made on first use: the
// storetest.Harness Effect of SQLite stores.
func Effect(ctx context.Context, tx any, name string) error {
	stx := tx.(*sql.Tx)
	if _, err := stx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS storetest_effects (name TEXT NOT NULL)`); err != nil {
		return err
	}
	_, err := stx.ExecContext(ctx, `INSERT INTO storetest_effects (name) VALUES (?)`, name)
	return err
}

// Effects lists the effects Effect committed to the database at path,
// sorted (none before the first).
func Effects(t testing.TB, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return storetest.EffectNames(t, db, func(err error) bool { return strings.Contains(err.Error(), "no such table") })
}
