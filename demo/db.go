package demo

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/migrate"
	"github.com/idem-run/idem/internal/storeerr"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/sqlitestore"
)

//go:embed schema
var schemaFS embed.FS

// DB is the demo's own connection pool to the idem database. SQL is
// written once with ? placeholders; on PostgreSQL they become $1, $2, ….
// Times are stored as INTEGER unix microseconds on both.
//
// Transactions run on database/sql (modernc) on SQLite and on pgx,
// natively, on PostgreSQL: the drivers of the stores, whose transactions
// a transactional operation's handler writes through (InCall).
type DB struct {
	sql     *sql.DB       // SQLite
	pool    *pgxpool.Pool // PostgreSQL
	dialect string        // "sqlite" or "postgres"
	// writer, if set, runs transactions instead of sql (Config.Writer).
	writer func(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
	// onQuery, if set, sees every query a transaction runs, as written
	// (tests read their plans).
	onQuery func(q string, args []any)
}

func openDB(ctx context.Context, storeURL string) (*DB, error) {
	var d DB
	switch {
	case strings.HasPrefix(storeURL, "sqlite:"):
		path := strings.TrimPrefix(storeURL, "sqlite:")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1) // one writer, like the store's
		d = DB{sql: db, dialect: "sqlite"}
	case strings.HasPrefix(storeURL, "postgres://"), strings.HasPrefix(storeURL, "postgresql://"):
		// The pool pings connections that sat idle before handing them
		// out, so a restarted database is reconnected to instead of
		// failing the first request.
		cfg, err := pgxpool.ParseConfig(storeURL)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(storeURL, "pool_max_conns") {
			cfg.MaxConns = pgstore.DefaultMaxConns
		}
		cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > 250*time.Millisecond }
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		d = DB{pool: pool, dialect: "postgres"}
	default:
		return nil, fmt.Errorf("demo: store %q: want sqlite:PATH or postgres://…", storeURL)
	}
	if err := d.migrate(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return &d, nil
}

// Close closes the pool.
func (d *DB) Close() error {
	if d.pool != nil {
		d.pool.Close()
		return nil
	}
	return d.sql.Close()
}

// migrate applies schema/NNN_name.up.sql (one SQL for both dialects) in
// order, each in one transaction, recorded in idem_demo_schema_migrations.
// On PostgreSQL a transaction-scoped advisory lock serialises instances
// starting at once.
func (d *DB) migrate(ctx context.Context) error {
	all, err := migrate.Load(schemaFS, "schema")
	if err != nil {
		return err
	}
	lock := func(tx *Tx) error {
		if d.dialect != "postgres" {
			return nil
		}
		_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7243001)`)
		return err
	}
	err = d.InTx(ctx, func(tx *Tx) error {
		if err := lock(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_demo_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("demo migrate: %w", err)
	}
	for _, m := range all {
		err := d.InTx(ctx, func(tx *Tx) error {
			if err := lock(tx); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM idem_demo_schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil || n > 0 {
				return err
			}
			// No arguments: pgx sends it as a simple query, which may hold
			// several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO idem_demo_schema_migrations (version, name) VALUES (?, ?)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("demo migrate %s: %w", m.ID(), err)
		}
	}
	return nil
}

// rebind turns ? placeholders into $n on PostgreSQL (? never appears in
// the demo's string literals).
func (d *DB) rebind(q string) string {
	if d.dialect != "postgres" || !strings.Contains(q, "?") {
		return q
	}
	b := make([]byte, 0, len(q)+2*strings.Count(q, "?"))
	n := 0
	for i := 0; i < len(q); i++ { // '?' is never a byte of another character in UTF-8
		if q[i] == '?' {
			n++
			b = strconv.AppendInt(append(b, '$'), int64(n), 10)
			continue
		}
		b = append(b, q[i])
	}
	return string(b)
}

// Tx is one demo transaction, on whichever driver runs it: database/sql
// (SQLite, and PostgreSQL effects that check a fence) or pgx (PostgreSQL).
// Handlers write their SQL once, with ? placeholders, against Tx.
type Tx struct {
	q querier
	d *DB
	// fenced is the fence a check in this transaction passed, which it
	// holds until it ends (checkFence).
	fenced idem.Fence
}

// querier runs a transaction's statements, q already rebound.
type querier interface {
	exec(ctx context.Context, q string, args []any) (rowsAffected int64, err error)
	query(ctx context.Context, q string, args []any) (rows, error)
	queryRow(ctx context.Context, q string, args []any) rowScanner
}

// rows is a query's result: *sql.Rows, or pgx.Rows through pgxRows.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Close() error
	Err() error
}

// rowScanner is one row (*sql.Row, pgx.Row) or the current row of rows.
type rowScanner interface{ Scan(...any) error }

// Exec runs a statement and returns how many rows it changed.
func (t *Tx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return t.q.exec(ctx, t.d.rebind(q), args)
}

// Query runs a query; close the rows (collect does) before the next
// statement.
func (t *Tx) Query(ctx context.Context, q string, args ...any) (rows, error) {
	if t.d.onQuery != nil {
		t.d.onQuery(q, args)
	}
	return t.q.query(ctx, t.d.rebind(q), args)
}

// QueryRow runs a query for one row; its Scan answers an error that
// errors.Is sql.ErrNoRows when there is none (pgx.ErrNoRows is one).
func (t *Tx) QueryRow(ctx context.Context, q string, args ...any) rowScanner {
	if t.d.onQuery != nil {
		t.d.onQuery(q, args)
	}
	return t.q.queryRow(ctx, t.d.rebind(q), args)
}

// sqlTx runs statements on a database/sql transaction.
type sqlTx struct{ tx *sql.Tx }

// Its statements go through sqlitestore's, which runs them prepared once
// on the store's writer (a transaction of the demo's own pool runs them as
// database/sql does).
func (t sqlTx) exec(ctx context.Context, q string, args []any) (int64, error) {
	res, err := sqlitestore.ExecContext(ctx, t.tx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) query(ctx context.Context, q string, args []any) (rows, error) {
	r, err := sqlitestore.QueryContext(ctx, t.tx, q, args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (t sqlTx) queryRow(ctx context.Context, q string, args []any) rowScanner {
	return sqlitestore.QueryRowContext(ctx, t.tx, q, args...)
}

// pgxTx runs statements on a pgx transaction.
type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, q string, args []any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t pgxTx) query(ctx context.Context, q string, args []any) (rows, error) {
	r, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{r}, nil
}

func (t pgxTx) queryRow(ctx context.Context, q string, args []any) rowScanner {
	return t.tx.QueryRow(ctx, q, args...)
}

// pgxRows gives pgx.Rows the Close of rows.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return nil
}

// InTx runs fn in one transaction (IMMEDIATE on SQLite; on PostgreSQL a
// pgx transaction at READ COMMITTED, so use SELECT … FOR UPDATE
// (forUpdate) or conditional updates where rows race). Errors that are not
// idem errors come back as STORE_UNAVAILABLE, so a handler fails closed. A
// transaction that failed on a dead connection before it could commit (a
// restarted database) is run once more on a fresh one: nothing of it was
// applied. With a Config.Writer, fn shares the store's writer and may also
// run again when its batch failed; so fn must start from scratch every
// time it runs.
func (d *DB) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	if d.writer != nil {
		return d.dbError(d.writer(ctx, func(_ context.Context, tx *sql.Tx) error { return fn(&Tx{q: sqlTx{tx}, d: d}) }))
	}
	err := d.inTx(ctx, fn)
	if deadConnection(err) && ctx.Err() == nil {
		err = d.inTx(ctx, fn)
	}
	return d.dbError(err)
}

// InCall runs fn on the transaction of call when call carries one of the
// store the demo shares its database with: the handler of a transactional
// operation (SPEC §6.7), whose writes commit with the reservation, the
// completion and the audit events. fn then runs once, with no retry and
// no commit of its own (the runner commits), and must not catch a database
// error and go on (an error aborts a PostgreSQL transaction): its errors
// are the handler's, a declared 4xx rolling back fn's writes alone and
// anything else the whole transaction. Without such a transaction it is
// InTx. A handler that uses InCall must reach the database only through
// it: on SQLite a second transaction would wait for the store's writer,
// which the call holds.
func (d *DB) InCall(ctx context.Context, call *idem.Call, fn func(tx *Tx) error) error {
	q, err := d.callTx(call)
	if err != nil {
		return err
	}
	if q != nil {
		return d.dbError(fn(&Tx{q: q, d: d}))
	}
	return d.InTx(ctx, fn)
}

// callTx is the store's transaction that call carries, nil without one.
// A transaction of the other store is refused: the demo's tables are not
// in that database.
func (d *DB) callTx(call *idem.Call) (querier, error) {
	if call == nil || call.Transaction() == nil {
		return nil, nil
	}
	if tx := pgstore.Tx(call); tx != nil && d.dialect == "postgres" {
		return pgxTx{tx}, nil
	}
	if tx := sqlitestore.Tx(call); tx != nil && d.dialect == "sqlite" {
		return sqlTx{tx}, nil
	}
	return nil, fmt.Errorf("demo: the call of %s carries a %T, not a transaction of the demo's %s database (run the demo on the store's URL)", call.Operation, call.Transaction(), d.dialect)
}

// notCommitted marks err, what InTx returned, idem.NotDispatched when it
// is a store failure (STORE_UNAVAILABLE, the caller's ctx still live) of a
// transaction certain not to have committed: on SQLite any failure, a
// failed COMMIT included (its frames are never added to the WAL's index,
// and the next write overwrites them); on PostgreSQL one raised before
// COMMIT was sent, since a COMMIT whose answer was lost may have
// committed. A handler whose effect lives wholly in that transaction
// returns it: the pipeline then frees the key instead of leaving the
// record indeterminate. Any other err comes back as it is.
func (d *DB) notCommitted(ctx context.Context, err error) error {
	var before errBeforeCommit
	if ctx.Err() != nil || !errors.Is(err, idem.ErrStoreUnavailable) ||
		(d.dialect != "sqlite" && !errors.As(err, &before)) {
		return err
	}
	return idem.NotDispatched(err)
}

// errBeforeCommit marks errors raised before COMMIT was sent.
type errBeforeCommit struct{ error }

func (e errBeforeCommit) Unwrap() error { return e.error }

func (d *DB) inTx(ctx context.Context, fn func(tx *Tx) error) error {
	if d.pool != nil {
		tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			return errBeforeCommit{err}
		}
		if err := fn(&Tx{q: pgxTx{tx}, d: d}); err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
			return errBeforeCommit{err}
		}
		return tx.Commit(ctx)
	}
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return errBeforeCommit{err}
	}
	if err := fn(&Tx{q: sqlTx{tx}, d: d}); err != nil {
		tx.Rollback()
		return errBeforeCommit{err}
	}
	return tx.Commit()
}

// deadConnection reports an error raised before commit by a connection
// that was already gone (pgx says "conn closed", or that nothing was sent;
// database/sql says driver.ErrBadConn).
func deadConnection(err error) bool {
	var before errBeforeCommit
	if !errors.As(err, &before) {
		return false
	}
	return errors.Is(err, driver.ErrBadConn) || pgconn.SafeToRetry(err) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "connection reset")
}

// collect scans every row into a new slice (empty, never nil) and closes
// rows. Assigning its result, rather than appending to a list outside the
// transaction function, keeps that function right when it runs again.
func collect[T any](rows rows, scan func(rowScanner) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// forUpdate is the row-lock suffix of a SELECT: FOR UPDATE on PostgreSQL,
// nothing on SQLite (whose write transactions hold the database lock).
func (d *DB) forUpdate() string {
	if d.dialect == "postgres" {
		return " FOR UPDATE"
	}
	return ""
}

// dbError maps what a transaction returned by the stores' rule
// (internal/storeerr): idem errors and context ends pass, a statement
// refused for its data is INTERNAL, anything else STORE_UNAVAILABLE (the
// handler fails closed).
func (d *DB) dbError(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	refused := pgstore.RefusedStatement
	if d.dialect == "sqlite" {
		refused = sqlitestore.RefusedStatement
	}
	return storeerr.Interpret(context.Background(), "demo", "demo transaction", err, refused)
}

// micros stores a time; fromMicros reads it back in UTC.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
