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

// The savepoint around a transactional handler's writes, and the bound
// on the transaction's idle time (sql/).
var (
	openSavepointSQL     = section("handler_savepoint", "open")
	rollbackSavepointSQL = section("handler_savepoint", "rollback")
	idleTimeoutSQL       = statement("idle_timeout")
	notifyRollbackSQL    = statement("notify_rollback")
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
// at the end (transactfinal.go). The transaction may
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
	// One round trip begins the transaction, bounds its idle time, reads
	// (or reserves) the key and opens the handler's savepoint.
	open := &pipelined{conn: conn.Conn(), after: []string{openSavepointSQL}}
	// held: the key's lock is this transaction's, so a same-key waiter may
	// be behind it, here or on another instance.
	held, committed := false, false
	defer func() {
		if open.Tx != nil {
			open.Tx.Rollback(context.WithoutCancel(ctx)) // a no-op once committed
		}
		if held && !committed {
			signalRollback(ctx, conn.Conn(), p.Scope, p.Key)
		}
	}()
	// A keyed execution's try of the key's lock also bounds the
	// transaction's idle time by the lease (key_lock.sql).
	var fence int64
	start := now
	final := p.Key != "" && p.ApprovalID == "" // the record is written once, at the end
	if final {
		a, found, busy, err := peekTx(ctx, open, p, now)
		switch {
		case err != nil:
			return idem.TransactResult{}, err
		case busy:
			return idem.TransactResult{}, idem.ErrKeyBusy
		case found:
			return idem.TransactResult{Attempt: a}, nil
		}
	} else if p.Key != "" {
		r, busy, err := reserveTx(ctx, open, p, now, true)
		switch {
		case err != nil:
			return idem.TransactResult{}, err
		case busy:
			return idem.TransactResult{}, idem.ErrKeyBusy
		case !r.Reserved:
			return idem.TransactResult{Attempt: r.Attempt}, nil
		}
		fence = r.Attempt.FencingToken
	} else if _, err := startExecution(ctx, open, p.StartParams, now); err != nil {
		return idem.TransactResult{}, err
	}
	tx := open.Tx
	held = p.Key != ""
	out := run(ctx, tx)
	if out.Abort {
		return idem.TransactResult{Reserved: true}, nil // rolled back by the deferred Rollback
	}
	// Undone, the rollback to the savepoint goes in the completion's round
	// trip; kept, the commit releases the savepoint.
	end := &pipelined{Tx: tx}
	if out.Undo {
		end.before = []queued{{rollbackSavepointSQL, nil}}
	}
	now = s.now() // the handler took time: the lease is checked against now
	res := idem.TransactResult{Reserved: true, Committed: true}
	if p.Key == "" {
		fin := out.Result.Finish
		fin.Org, fin.ExecutionID = p.Scope.Org, p.ExecutionID
		err = finishExecution(ctx, end, fin, now)
	} else {
		c := out.Result
		c.Scope, c.Key, c.FencingToken = p.Scope, p.Key, fence
		var headers []byte
		headers, err = json.Marshal(idem.FilterReplayedHeaders(c.Headers))
		switch {
		case err != nil:
		case final && !now.Before(start.Add(p.Lease)):
			err = idem.ErrFenced // the lease passed while the handler ran
		case final && canInsertFinal(c, p.ExecutionID):
			res.Attempt, err = insertFinalTx(ctx, end, p, c, headers, start, now)
		case final:
			// Events naming another execution, which finalSQL does not
			// write: reserve now (the lock is this transaction's), then
			// complete.
			var r idem.ReserveResult
			if r, _, err = reserveTx(ctx, end, p, start, false); err == nil {
				c.FencingToken = r.Attempt.FencingToken
				res.Attempt, err = completeTx(ctx, tx, c, headers, now)
			}
		default:
			res.Attempt, err = completeTx(ctx, end, c, headers, now)
		}
		res.Attempt = res.Attempt.Observe(now)
	}
	if err == nil {
		err = tx.Commit(ctx)
		committed = err == nil
	}
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
// batch or query carries them; later ones go as they are.
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
