// Package pgstore is the idem.Store on PostgreSQL (pgx/v5), for any number
// of idem instances sharing one database.
//
// Each method is one READ COMMITTED transaction; the hot writes (Reserve,
// Complete, executions and their events) share transactions with the other
// writes waiting at the same moment (group commit). An execution is one
// row of idem_records, which is its attempt record too when it is keyed,
// with its own events in a JSON array (migration 006); a unique index on
// the keys records hold is the one lookup of a key. Reservations of one
// key queue on a transaction-scoped advisory lock on the key, from any
// instance, so that each reads what the previous one committed; retention
// is batched deletes by indexed times; approvals are consumed
// by a conditional UPDATE; concurrent approval requests for one intent are
// serialised by a transaction-scoped advisory lock; sweepers take their
// batches with FOR UPDATE SKIP LOCKED. Time comes only from the store's
// clock (the database's, sampled, unless StoreConfig.Clock is set) and is
// passed to SQL as parameters; CheckFence alone reads clock_timestamp()
// in its statement.
//
// Every statement the store sends is in sql/, embedded at build time
// (sql.go): one file per statement, or per group of related statements in
// sections that each start with a "-- name:" line, named after what it
// does. A statement's leading comment says what it takes and returns; the
// text below it is sent as it stands. The schema is made by migrations/,
// which Migrate runs as they are. A pool Open makes (or ConfigurePool
// configures) runs every statement on its generic plan (plan_cache_mode),
// prepared once per connection by pgx's statement cache, each planned
// once, not on every call, and without sequential scans (enable_seqscan),
// so that no plan depends on the tables' statistics.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/groupcommit"
)

var _ idem.Store = (*Store)(nil)

// Store is an idem.Store on a pgx connection pool.
type Store struct {
	pool  *pgxpool.Pool
	clock idem.Clock
	// dbClock is clock when StoreConfig.Clock is nil: the database's.
	dbClock   *dbClock
	ownsPool  bool
	migrated  []string // by Open
	closeOnce sync.Once
	writes    *groupcommit.Committer[pgx.Tx]
	// completions batches Complete calls into set-based statements
	// (completeSet), apart from the other writes.
	completions *groupcommit.Batcher[pgx.Tx, completion, idem.Attempt]
	feed        feed
	// settleWait bounds settleLease's wait for a fenced effect.
	settleWait time.Duration
	// txSlots bounds the transactional executions holding a connection
	// at once to half the pool, so that the other writes always find one.
	txSlots chan struct{}
}

// DefaultMaxConns is the pool size when the URL sets no pool_max_conns.
// pgx's own default (the number of CPUs, at least 4) serialises a busy
// server behind a few connections: every request holds one for a commit
// round trip, so the pool, not the database, becomes the limit.
const DefaultMaxConns = 32

// Open connects to the database at url (a postgres:// URL or libpq
// keyword/value string), applies pending migrations and returns the store.
// Close closes its pool. An unreachable database is STORE_UNAVAILABLE; a
// database the server does not have is a *MissingDatabaseError, which
// says how to create it, and a role it refuses a *LoginRefusedError.
func Open(ctx context.Context, url string, cfg idem.StoreConfig) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse database url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		pcfg.MaxConns = DefaultMaxConns
	}
	if cfg.ConnectTimeout > 0 && !strings.Contains(url, "connect_timeout") {
		pcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	ConfigurePool(pcfg)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg) // connects lazily: Migrate is the first contact
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	migrated, err := migrateApplied(ctx, pool)
	if err != nil {
		pool.Close()
		if setup := setupError(err); setup != nil {
			return nil, setup
		}
		if ctx.Err() == nil {
			if u := unreachable(err, pcfg.ConnConfig.ConnectTimeout); u != nil {
				return nil, u
			}
		}
		return nil, err
	}
	s, err := newStore(ctx, pool, cfg, time.Now)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool, s.migrated = true, migrated
	return s, nil
}

// sessionParams are the planner settings of the store's sessions, each
// kept when the URL sets it (docs/store.md, "Plans that cannot go bad"):
// every statement on its generic plan, planned once per connection, and
// no sequential scan while an index can serve, so that a plan made on a
// fresh, never analyzed table (which PostgreSQL takes for 10 pages) is
// the plan that serves millions of rows.
var sessionParams = map[string]string{
	"plan_cache_mode": "force_generic_plan",
	"enable_seqscan":  "off",
}

// ConfigurePool gives cfg's sessions the store's planner settings, those
// Open's pool has, leaving alone any cfg already sets: for a pool made for
// New.
func ConfigurePool(cfg *pgxpool.Config) {
	for name, value := range sessionParams {
		if _, set := cfg.ConnConfig.RuntimeParams[name]; !set {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
	}
}

// Migrated names the migrations Open applied ("001_records"), in order;
// none when the schema was up to date.
func (s *Store) Migrated() []string { return s.migrated }

// New returns a store on a pool the caller owns and has migrated (see
// Migrate) and configured (ConfigurePool); Close leaves the pool open.
// Unless cfg.Clock is set, the store's clock is the database's
// (clock_timestamp(), measured now and every minute until Close,
// advanced in between by the local monotonic clock): an unreachable
// database fails New.
func New(ctx context.Context, pool *pgxpool.Pool, cfg idem.StoreConfig) (*Store, error) {
	return newStore(ctx, pool, cfg, time.Now)
}

// newStore is New with the local clock the database's clock is measured
// against (tests skew it).
func newStore(ctx context.Context, pool *pgxpool.Pool, cfg idem.StoreConfig, local func() time.Time) (*Store, error) {
	s := &Store{pool: pool, clock: cfg.Clock, settleWait: settleLockTimeout,
		txSlots: make(chan struct{}, max(pool.Config().MaxConns/2, 1))}
	if s.clock == nil {
		c, err := startDBClock(ctx, pool, local)
		if err != nil {
			return nil, err
		}
		s.clock, s.dbClock = c, c
	}
	s.writes = groupcommit.New(s.runTx, groupcommit.Config{Workers: writeWorkers, MaxBatch: maxBatch})
	s.completions = groupcommit.NewBatcher(s.runTx, s.completeSet, groupcommit.Config{Workers: completionWorkers, MaxBatch: maxBatch})
	return s, nil
}

// Close stops the writers and the clock's sampling, and closes the pool
// if Open made it. It may be called more than once.
func (s *Store) Close() error {
	s.feed.close()
	s.writes.Close()
	s.completions.Close()
	s.closeOnce.Do(func() {
		if s.dbClock != nil {
			s.dbClock.close()
		}
		if s.ownsPool {
			s.pool.Close()
		}
	})
	return nil
}

// now reads the store's clock (the database's, see dbClock) at the
// precision PostgreSQL keeps, so that times compared in Go and in SQL
// agree.
func (s *Store) now() time.Time {
	return s.clock.Now().UTC().Truncate(time.Microsecond)
}

// maxTxAttempts bounds how often a transaction that lost a serialization
// failure or a deadlock is run again.
const maxTxAttempts = 3

// Group commit: up to writeWorkers write transactions run at once, each
// shared by up to maxBatch callers.
const (
	writeWorkers = 8
	maxBatch     = 64
)

// completionWorkers is how many batches of completions (one set-based
// statement each, completeSet) run at once: fewer than writeWorkers,
// because the set statement pays off with the size of its batches, and
// with as many workers as the other writes the batches of 16 clients
// stayed near one call (docs/store.md, "Group commit").
const completionWorkers = 4

// inTx runs fn in one transaction of its own, committing if fn returns
// nil. Every error leaves through interpretError.
func (s *Store) inTx(ctx context.Context, op string, fn func(pgx.Tx) error) error {
	err := s.runTx(ctx, func(_ context.Context, tx pgx.Tx) error { return fn(tx) })
	return interpretError(ctx, op, err)
}

// write runs fn in a transaction shared with the other writes waiting at
// that moment (group commit: one commit for all of them; see
// internal/groupcommit). fn must use the ctx it is given.
func (s *Store) write(ctx context.Context, op string, fn groupcommit.Fn[pgx.Tx]) error {
	return interpretError(ctx, op, s.writes.Do(ctx, fn))
}

// runTx runs fn in one transaction, committing if fn returns nil; it is the
// only place that retries (serialization failures and deadlocks). fn must
// start from scratch on each call.
func (s *Store) runTx(ctx context.Context, fn groupcommit.Fn[pgx.Tx]) error {
	for attempt := 1; ; attempt++ {
		err := s.txOnce(ctx, fn)
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		retry := errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
		if !retry || attempt == maxTxAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// txOnce runs fn in one transaction whose BEGIN travels in the round trip
// of fn's first batch or query (pipelined; issue 36 item 2), committing if
// fn returns nil. A transaction fn sent nothing in is never begun.
func (s *Store) txOnce(ctx context.Context, fn groupcommit.Fn[pgx.Tx]) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx := &pipelined{conn: conn.Conn()}
	defer func() {
		if tx.Tx != nil && conn.Conn().PgConn().TxStatus() != 'I' {
			tx.Tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if tx.Tx == nil {
		return nil
	}
	return tx.Tx.Commit(ctx)
}

// scanner is a pgx.Row or pgx.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// utc returns t in UTC, and the zero time for NULL.
func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// utcPtr returns *t in UTC, or nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// nullable maps the zero value ("", 0) to SQL NULL.
func nullable[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// Ping implements idem.Store: one round trip on a pooled connection.
func (s *Store) Ping(ctx context.Context) error {
	return s.inTx(ctx, "ping", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, pingSQL)
		return err
	})
}

// pingSQL is Ping's statement.
var pingSQL = statement("ping")

// WriteStats returns how many write transactions ran and how many store
// calls they carried (group commit, completions' batches included).
func (s *Store) WriteStats() (transactions, calls int64) {
	t, c := s.writes.Stats()
	ct, cc := s.completions.Stats()
	return t + ct, c + cc
}
