// Package sqlitestore is the embedded default idem.Store: one SQLite file
// through modernc.org/sqlite (pure Go), in WAL mode with durable commits.
//
// Each Store has one write connection, whose transactions are BEGIN
// IMMEDIATE and shared by the writes waiting at the same moment (group
// commit, one fsync for all of them; the WAL checkpointed between batches,
// never inside a commit: checkpoint.go), and a small pool of read
// connections. Several Stores, even in
// several processes, may share one file: SQLite's write lock, waited for up
// to the busy timeout, serializes their writes.
//
// An execution, keyed or not, is one row of idem_records (migration 005):
// the attempt record of its key, the execution and its audit events (a
// JSON array, events.go). The row holds its key (held = 1) until it is
// forgotten or released, and stays, with its events, until the audit
// retention. A first execution inserts its row and its completion updates
// it; a transactional one inserts it once, final. Approvals are rows of
// idem_approvals, fencing tokens come from idem_counters.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/groupcommit"
)

// busyTimeout is how long a statement waits for another connection's lock
// before it fails as STORE_UNAVAILABLE.
const busyTimeout = 10 * time.Second

// readConns is the size of the read pool.
const readConns = 4

// Store is an idem.Store on one SQLite file.
type Store struct {
	w      *sql.DB // one connection; transactions are BEGIN IMMEDIATE
	r      *sql.DB // plain reads
	clock  idem.Clock
	writes *groupcommit.Committer[txn]
	busy   busyKeys // keys of transactional executions in the writer
	// Prepared statements of each pool.
	wstmts, rstmts *stmtCache
	ckpt           *checkpointer // checkpoint.go
	// commitProbe, when set (tests), wraps every commit of the writer.
	commitProbe func(commit func() error) error
	migrated    []string // by Open
	path        string   // the database file, absolute where it can be, for errors
}

// maxBatch caps the writes that share one transaction.
const maxBatch = 128

var _ idem.Store = (*Store)(nil)

// Open opens the database file at path, creating it if absent (its
// directory must exist) with mode 0600, applies pending migrations and
// returns the store.
func Open(ctx context.Context, path string, cfg idem.StoreConfig) (*Store, error) {
	cfg = cfg.WithDefaults()
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("sqlitestore: open %q: want the path of a database file", path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: directory %s: %w", path, dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("sqlitestore: open %s: %s is not a directory", path, dir)
	}
	if err := checkWritable(path, dir); err != nil {
		return nil, err
	}
	if err := createFile(path); err != nil {
		return nil, err
	}

	// The writer's commits never checkpoint: it does between batches
	// (checkpoint.go).
	w, err := openPool(ctx, path, 1, "_txlock=immediate&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		return nil, err
	}
	migrated, err := applyMigrations(ctx, w, cfg.Clock)
	if err != nil {
		w.Close()
		return nil, err
	}
	r, err := openPool(ctx, path, readConns, "_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, err
	}
	s := &Store{w: w, r: r, clock: cfg.Clock, wstmts: newStmtCache(w), rstmts: newStmtCache(r), migrated: migrated, path: path,
		ckpt: newCheckpointer(w)}
	if abs, err := filepath.Abs(path); err == nil {
		s.path = abs
	}
	s.writes = groupcommit.NewIsolated(s.runWrite, isolate, groupcommit.Config{Workers: 1, MaxBatch: maxBatch, Timeout: 2 * busyTimeout,
		After: s.ckpt.after})
	return s, nil
}

// Migrated names the migrations Open applied ("001_records"), in order;
// none when the schema was up to date.
func (s *Store) Migrated() []string { return s.migrated }

// createFile creates the database file, empty and 0600 (SQLite's own
// default is 0644 less the umask), unless it exists: an existing file keeps
// its mode. SQLite gives the -wal and -shm files it creates the mode of the
// database file, so they are 0600 too.
func createFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: create %s: %w", path, err)
	}
	return f.Close()
}

// openPool opens a pool of at most n connections on path, each set up by the
// DSN: busy timeout, WAL, synchronous=FULL, foreign keys, plus extra.
func openPool(ctx context.Context, path string, n int, extra string) (*sql.DB, error) {
	escape := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	dsn := "file:" + escape.Replace(path) + "?" + strings.Join([]string{
		fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeout.Milliseconds()),
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(FULL)",
		"_pragma=foreign_keys(1)",
		extra,
	}, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	if err := ping(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	return db, nil
}

// ping opens a first connection. The connection that turns a new file to
// WAL can meet SQLITE_BUSY from a concurrent opener without SQLite waiting,
// so a busy ping is retried for up to busyTimeout.
func ping(ctx context.Context, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, busyTimeout)
	defer cancel()
	for {
		err := db.PingContext(ctx)
		var e *sqlite.Error
		if err == nil || !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops the writer and closes both pools.
func (s *Store) Close() error {
	s.writes.Close()
	s.wstmts.close()
	s.rstmts.close()
	return errors.Join(s.w.Close(), s.r.Close())
}

// write runs fn in a BEGIN IMMEDIATE transaction on the write connection,
// shared with the other writes waiting at that moment (group commit: one
// fsync for all of them; see internal/groupcommit). fn must use the ctx it
// is given. now is read from the clock when fn starts, inside the write
// lock, so times never run backwards between writes and a write's checks
// (a lease, an expiry) use the time it really runs at, even late in a batch.
func (s *Store) write(ctx context.Context, op string, fn func(ctx context.Context, tx txn, now time.Time) error) error {
	err := s.writes.Do(ctx, func(ctx context.Context, tx txn) error { return fn(ctx, tx, s.now()) })
	return interpretFileError(ctx, s.path, op, err)
}

// Write runs fn in a write transaction on the store's own writer, batched
// with the store's writes (group commit), for an application that keeps its
// tables in the same database file: its writes then share the store's
// fsyncs instead of contending with them for the file's lock. fn must use
// the ctx it is given; it runs once, under a savepoint of the shared
// transaction, so that its failure rolls back its writes alone; Write
// returns once they are committed. Errors that are not
// idem errors come back as the store's own do: a statement refused for its
// data as INTERNAL, any other failure as STORE_UNAVAILABLE.
func (s *Store) Write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.write(ctx, "application write", func(ctx context.Context, tx txn, _ time.Time) error {
		return lend(tx, func(htx *sql.Tx) error { return fn(ctx, htx) })
	})
}

// runWrite is the committer's transaction: BEGIN IMMEDIATE, fn, COMMIT.
func (s *Store) runWrite(ctx context.Context, fn groupcommit.Fn[txn]) error {
	if s.wstmts.hasWanted() {
		s.wstmts.prepareWanted(ctx)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(ctx, txn{tx, s.wstmts}); err != nil {
		return err
	}
	if s.commitProbe != nil {
		return s.commitProbe(tx.Commit)
	}
	return tx.Commit()
}

// read runs fn in one read transaction (a consistent snapshot) on the read
// pool.
func (s *Store) read(ctx context.Context, op string, fn func(tx txn, now time.Time) error) error {
	if s.rstmts.hasWanted() {
		s.rstmts.prepareWanted(ctx)
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return interpretFileError(ctx, s.path, op, err)
	}
	defer tx.Rollback()
	if err := fn(txn{tx, s.rstmts}, s.now()); err != nil {
		return interpretFileError(ctx, s.path, op, err)
	}
	return interpretFileError(ctx, s.path, op, tx.Commit())
}

// now is the clock's time at the precision the store keeps.
func (s *Store) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Times are stored as unix microseconds, UTC.

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(t time.Time) sql.NullInt64 {
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: !t.IsZero()}
}

func timeOrZero(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

func stringPtr(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Ping implements idem.Store: it reads the schema version table, so a file
// that cannot be read fails.
func (s *Store) Ping(ctx context.Context) error {
	return s.read(ctx, "ping", func(tx txn, _ time.Time) error {
		var n int
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM idem_schema_migrations`).Scan(&n)
	})
}

// WriteStats returns how many write transactions ran and how many store
// calls they carried (group commit).
func (s *Store) WriteStats() (transactions, calls int64) { return s.writes.Stats() }
