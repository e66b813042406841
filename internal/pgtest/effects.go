package pgtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/idem-run/idem/storetest"
)

// EffectsDB creates the storetest effects table in the database at url
// and returns a database/sql pool on it, closed when the test ends.
func EffectsDB(t testing.TB, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE ` + storetest.EffectsTable + ` (name text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// Effect writes an effect called name through tx (a pgx.Tx on the
// database): the storetest.Harness Effect of PostgreSQL stores.
func Effect(ctx context.Context, tx any, name string) error {
	_, err := tx.(pgx.Tx).Exec(ctx, `INSERT INTO `+storetest.EffectsTable+` (name) VALUES ($1)`, name)
	return err
}
