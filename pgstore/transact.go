package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-run/idem"
)

var _ idem.Transactor = (*Store)(nil)

// idleTimeoutSQL bounds a transaction's idle time (sql/idle_timeout.sql).
var idleTimeoutSQL = statement("idle_timeout")

// The statements that end a transactional execution's transaction in the
// round trip of its last statement, or start it again without the
// handler's writes (Undo).
var (
	commitSQL         = section("transaction", "commit")
	rollbackChainSQL  = section("transaction", "rollback_and_chain")
	notifyRollbackSQL = statement("notify_rollback")
)

// rollbackSignalTimeout bounds the signal of a rolled-back execution.
const rollbackSignalTimeout = 5 * time.Second

// Tx returns the transaction of a transactional operation's call on a
// pgstore (idem.Call.Transaction), for the handler to write through; nil
// when the call has none.
func Tx(call *idem.Call) pgx.Tx {
	tx, _ := call.Transaction().(pgx.Tx)
	return tx
}

// Transact implements idem.Transactor on a transaction of its own, outside
// group commit (it lasts as long as its handler). A keyed execution only
// tries the key's advisory lock: while another transaction holds it, the
// answer is the committed record if there is one, else ErrKeyBusy, at
// once. Without an approval to consume, the record is written once, final,
// at the end (transactfinal.go), in the round trip that commits. No
// savepoint: a business error (Undo) rolls the whole transaction back and
// writes the call's own part again. The transaction may
// sit idle no longer than the lease (idle_in_transaction_session_timeout),
// so that a paused executor's key is freed, its work rolled back, when the
// lease ends. At most half the pool's connections run transactional
// executions at once; the others wait for a slot (until ctx ends).
func (s *Store) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	select {
	case s.txSlots <- struct{}{}:
		defer func() { <-s.txSlots }()
	case <-ctx.Done():
		return idem.TransactResult{}, ctx.Err()
	}
	res, err := s.transact(ctx, p, run)
	if err != nil {
		return idem.TransactResult{}, interpretError(ctx, "transact", err)
	}
	if !res.Reserved && res.Attempt.LeasePassed(s.now()) {
		if res.Attempt, err = s.settleLease(ctx, res.Attempt); err != nil {
			return idem.TransactResult{}, err
		}
	}
	return res, nil
}

func (s *Store) transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return idem.TransactResult{}, err
	}
	defer conn.Release()
	now := s.now()
	// One round trip begins the transaction and reads (or reserves) the
	// key, or starts the unkeyed execution.
	open := &pipelined{conn: conn.Conn()}
	// held: the key's lock is this transaction's, so a same-key waiter may
	// be behind it, here or on another instance.
	held, committed := false, false
	defer func() {
		// Still in a transaction (not committed in the last round trip, or
		// failed): roll it back.
		if open.Tx != nil && conn.Conn().PgConn().TxStatus() != 'I' {
			open.Tx.Rollback(context.WithoutCancel(ctx))
		}
		if held && !committed {
			signalRollback(ctx, conn.Conn(), p.Scope, p.Key)
		}
	}()
	start := now
	final := p.Key != "" && p.ApprovalID == "" // the record is written once, at the end
	res, fence, err := begin(ctx, open, p, start, final)
	if err != nil || !res.Reserved {
		return res, err
	}
	tx := open.Tx
	held = p.Key != ""
	out := run(ctx, tx)
	if out.Abort {
		return idem.TransactResult{Reserved: true}, nil // rolled back by the deferred Rollback
	}
	if out.Undo {
		// No savepoint on the common path: a business error rolls the
		// whole transaction back, the handler's writes with it, and
		// starts it again (ROLLBACK AND CHAIN) to write the call's own
		// part anew, in one round trip. Between the two, another call may
		// take the key: then this one answers as begin does, and nothing
		// of it is stored.
		again := &pipelined{Tx: tx, before: []queued{{rollbackChainSQL, nil}}}
		if res, fence, err = begin(ctx, again, p, start, final); err != nil || !res.Reserved {
			return res, err
		}
	}
	now = s.now() // the handler took time: the lease is checked against now
	res = idem.TransactResult{Reserved: true, Committed: true}
	// The last statement carries the COMMIT in its round trip, when it is
	// one batch; otherwise the commit has one of its own.
	end := &pipelined{Tx: tx, after: []string{commitSQL}}
	if p.Key == "" {
		fin := out.Result.Finish
		fin.Org, fin.ExecutionID = p.Scope.Org, p.ExecutionID
		err = finishExecution(ctx, end, fin, now)
	} else {
		c := out.Result
		c.Scope, c.Key, c.FencingToken = p.Scope, p.Key, fence
		replayed := idem.FilterReplayedHeaders(c.Headers)
		var headers []byte
		headers, err = json.Marshal(replayed)
		switch {
		case err != nil:
		case final && !now.Before(start.Add(p.Lease)):
			err = idem.ErrFenced // the lease passed while the handler ran
		case final && canInsertFinal(c, p.ExecutionID):
			res.Attempt, err = insertFinalTx(ctx, end, p, c, replayed, headers, start, now)
		case final:
			// Events naming another execution, which finalSQL does not
			// write: reserve now (the lock is this transaction's), then
			// complete.
			var r idem.ReserveResult
			if r, _, err = reserveTx(ctx, tx, p, start, false); err == nil {
				c.FencingToken = r.Attempt.FencingToken
				res.Attempt, err = completeTx(ctx, tx, c, headers, now)
			}
		case canInsertFinal(c, p.ExecutionID):
			res.Attempt, err = completeTx(ctx, end, c, headers, now)
		default:
			res.Attempt, err = completeTx(ctx, tx, c, headers, now)
		}
		res.Attempt = res.Attempt.Observe(now)
	}
	if err == nil && len(end.after) > 0 {
		err = tx.Commit(ctx) // the last statement was not one batch
	}
	committed = err == nil
	if err != nil {
		if errors.Is(err, idem.ErrFenced) {
			// The lease passed while the handler ran: nothing commits.
			return idem.TransactResult{Reserved: true}, nil
		}
		return idem.TransactResult{}, err
	}
	return res, nil
}

// signalRollback tells every instance's completion feed that the keyed
// execution on (scope, key) ended without committing. Its own NOTIFY would
// have left with its commit; a rollback sends nothing, and a Prefer: wait
// on another instance, which cannot tell an uncommitted execution from a
// rolled-back one (neither has a record it can read), would poll until
// its wait ran out. So the signal goes after the rollback, in a
// transaction of its own on the same connection (issue 33 item 7). Best
// effort, as the feed is: should it fail, waiters still poll.
func signalRollback(ctx context.Context, conn *pgx.Conn, scope idem.Scope, key string) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackSignalTimeout)
	defer cancel()
	_, _ = conn.Exec(sctx, notifyRollbackSQL, notifyPayload(scope, key))
}

// begin starts a transactional execution in tx: a keyed one without an
// approval reads the key (its record is written at the end, final), a
// keyed one with an approval reserves the key and consumes the approval,
// an unkeyed one starts its execution. Reserved false with the key's
// record, or ErrKeyBusy, when the key is taken; fence is the
// reservation's token.
func begin(ctx context.Context, tx pgx.Tx, p idem.ReserveParams, now time.Time, final bool) (res idem.TransactResult, fence int64, err error) {
	switch {
	case final:
		a, found, busy, err := peekTx(ctx, tx, p, now)
		switch {
		case err != nil:
			return idem.TransactResult{}, 0, err
		case busy:
			return idem.TransactResult{}, 0, idem.ErrKeyBusy
		case found:
			return idem.TransactResult{Attempt: a}, 0, nil
		}
	case p.Key != "":
		r, busy, err := reserveTx(ctx, tx, p, now, true)
		switch {
		case err != nil:
			return idem.TransactResult{}, 0, err
		case busy:
			return idem.TransactResult{}, 0, idem.ErrKeyBusy
		case !r.Reserved:
			return idem.TransactResult{Attempt: r.Attempt}, 0, nil
		}
		fence = r.Attempt.FencingToken
	default:
		if _, err := startExecution(ctx, tx, p.StartParams, now); err != nil {
			return idem.TransactResult{}, 0, err
		}
	}
	return idem.TransactResult{Reserved: true}, fence, nil
}

// queued is one statement and its arguments.
type queued struct {
	sql  string
	args []any
}

// pipelined is a pgx.Tx whose next batch or query carries more statements
// in the same round trip: before runs first (their results are read and
// checked here), after runs last (an error in them surfaces when the
// batch closes). With conn set and no Tx yet, that batch also begins the
// transaction on conn (Batch.BeginTx), which becomes Tx. Only the first
// batch or query carries them, and after is emptied once sent (so that
// the caller can tell whether a COMMIT went); later ones go as they are.
type pipelined struct {
	pgx.Tx
	conn   *pgx.Conn
	before []queued
	after  []string
}

func (t *pipelined) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	all := &pgx.Batch{}
	begin := t.Tx == nil
	if begin {
		all.BeginTx(pgx.TxOptions{})
	}
	for _, q := range t.before {
		all.Queue(q.sql, q.args...)
	}
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	for _, q := range t.after {
		all.Queue(q)
	}
	var br pgx.BatchResults
	if begin {
		br = t.conn.SendBatch(ctx, all)
		t.Tx = br.Tx()
	} else {
		br = t.Tx.SendBatch(ctx, all)
	}
	n := len(t.before) + b2i(begin)
	t.before, t.after = nil, nil
	for range n {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return failedBatch{err}
		}
	}
	return br
}

func (t *pipelined) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.SendBatch(ctx, b)
	return batchRow{br.QueryRow(), br}
}

// The other methods of pgx.Tx begin the transaction first, in a round
// trip of its own, when no batch has (before and after ride only on
// SendBatch and QueryRow).

// begun returns the transaction, begun on conn if it is not yet.
func (t *pipelined) begun(ctx context.Context) (pgx.Tx, error) {
	if t.Tx == nil {
		tx, err := t.conn.Begin(ctx)
		if err != nil {
			return nil, err
		}
		t.Tx = tx
	}
	return t.Tx, nil
}

func (t *pipelined) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Exec(ctx, sql, args...)
}

func (t *pipelined) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, sql, args...)
}

func (t *pipelined) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

func (t *pipelined) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

func (t *pipelined) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// Conn is the connection the transaction runs (or will run) on.
func (t *pipelined) Conn() *pgx.Conn {
	if t.Tx != nil {
		return t.Tx.Conn()
	}
	return t.conn
}

// batchRow is the one row of a batch, which Scan closes.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// failedBatch is the results of a batch whose first statements failed.
type failedBatch struct{ err error }

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return errRow{f.err} }
func (f failedBatch) Close() error                     { return f.err }
func (f failedBatch) Tx() pgx.Tx                       { return nil }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
