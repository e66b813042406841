package sqlitestore

import (
	"context"
	"database/sql"
	"sync"
)

// maxStatements bounds the prepared statements kept per pool (the store's
// SQL is a fixed set; the bound only guards against a bug).
const maxStatements = 256

// stmtCache prepares each statement once per pool: modernc's SQLite would
// otherwise parse every statement on every call, a fifth of the CPU a keyed
// execution costs. A statement seen for the first time runs unprepared and
// is prepared before the pool's next transaction begins (preparing needs a
// connection, which a caller inside a transaction already holds).
type stmtCache struct {
	db     *sql.DB
	mu     sync.RWMutex
	ready  map[string]*sql.Stmt
	wanted map[string]bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, ready: map[string]*sql.Stmt{}, wanted: map[string]bool{}}
}

// prepareWanted prepares the statements seen since the last call. The
// caller must hold no connection of the pool; the cache's lock is not held
// while preparing, since preparing waits for a connection that another
// caller, inside a transaction, may hold while it looks a statement up.
func (c *stmtCache) prepareWanted(ctx context.Context) {
	c.mu.Lock()
	var qs []string
	for q := range c.wanted {
		delete(c.wanted, q)
		qs = append(qs, q)
	}
	room := maxStatements - len(c.ready)
	c.mu.Unlock()
	for _, q := range qs[:min(len(qs), max(room, 0))] {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue // it runs unprepared; the next sighting asks again
		}
		c.mu.Lock()
		if _, dup := c.ready[q]; dup {
			st.Close()
		} else {
			c.ready[q] = st
		}
		c.mu.Unlock()
	}
}

// lookup returns q's prepared statement, or nil (and remembers q).
func (c *stmtCache) lookup(q string) *sql.Stmt {
	c.mu.RLock()
	st, ok := c.ready[q]
	pending := !ok && c.wanted[q]
	c.mu.RUnlock()
	if ok || pending {
		return st
	}
	c.mu.Lock()
	if _, ok := c.ready[q]; !ok {
		c.wanted[q] = true
	}
	c.mu.Unlock()
	return nil
}

func (c *stmtCache) hasWanted() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.wanted) > 0
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.ready {
		st.Close()
		delete(c.ready, q)
	}
}

// txn is a transaction whose statements come from its pool's stmtCache.
type txn struct {
	*sql.Tx
	stmts *stmtCache
}

// statementHook, when set (by tests, before Open), sees every statement
// the store runs through a txn, with its arguments.
var statementHook func(q string, args []any)

// ExecContext runs q through its prepared statement when there is one.
func (t txn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if statementHook != nil {
		statementHook(q, args)
	}
	if st := t.stmts.lookup(q); st != nil {
		return t.Tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, q, args...)
}

// QueryContext runs q through its prepared statement when there is one.
func (t txn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if statementHook != nil {
		statementHook(q, args)
	}
	if st := t.stmts.lookup(q); st != nil {
		return t.Tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, q, args...)
}

// QueryRowContext runs q through its prepared statement when there is one.
func (t txn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if statementHook != nil {
		statementHook(q, args)
	}
	if st := t.stmts.lookup(q); st != nil {
		return t.Tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, q, args...)
}

// rowQuerier runs a statement that reads one row: a txn, or a pool.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// pool runs single statements on a pool outside an explicit transaction:
// one statement reads one snapshot by itself, and BEGIN and COMMIT would
// be two statements more.
type pool struct {
	db    *sql.DB
	stmts *stmtCache
}

// QueryRowContext runs q through its prepared statement when there is one.
func (p pool) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if statementHook != nil {
		statementHook(q, args)
	}
	if st := p.stmts.lookup(q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.db.QueryRowContext(ctx, q, args...)
}
