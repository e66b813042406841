package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"

	"idem"
)

var _ idem.Transactor = (*Store)(nil)

// Tx returns the transaction of a transactional operation's call on a
// pgstore (idem.Call.Transaction), for the handler to write through; nil
// when the call has none.
func Tx(call *idem.Call) pgx.Tx {
	tx, _ := call.Transaction().(pgx.Tx)
	return tx
}

// Transact implements idem.Transactor on a transaction of its own, outside
// group commit (it lasts as long as its handler). A keyed execution only
// tries the key's advisory lock: while another transactional execution of
// the key holds it, the answer is ErrKeyBusy at once. The transaction may
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
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return idem.TransactResult{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	now := s.now()
	var fence int64
	if p.Key != "" {
		if _, err := tx.Exec(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`,
			strconv.FormatInt(max(p.Lease.Milliseconds(), 1), 10)); err != nil {
			return idem.TransactResult{}, err
		}
		r, busy, err := reserveTx(ctx, tx, p, now, true)
		switch {
		case err != nil:
			return idem.TransactResult{}, err
		case busy:
			return idem.TransactResult{}, idem.ErrKeyBusy
		case !r.Reserved:
			return idem.TransactResult{Attempt: r.Attempt}, nil
		}
		fence = r.Attempt.FencingToken
	} else if _, err := startExecution(ctx, tx, p.StartParams, now); err != nil {
		return idem.TransactResult{}, err
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT idem_handler`); err != nil {
		return idem.TransactResult{}, err
	}
	out := run(ctx, tx)
	if out.Abort {
		return idem.TransactResult{Reserved: true}, nil // rolled back by the deferred Rollback
	}
	end := `RELEASE SAVEPOINT idem_handler`
	if out.Undo {
		end = `ROLLBACK TO SAVEPOINT idem_handler`
	}
	if _, err := tx.Exec(ctx, end); err != nil {
		return idem.TransactResult{}, err
	}
	now = s.now() // the handler took time: the lease is checked against now
	res := idem.TransactResult{Reserved: true, Committed: true}
	if p.Key == "" {
		fin := out.Result.Finish
		fin.Org, fin.ExecutionID = p.Scope.Org, p.ExecutionID
		err = finishExecution(ctx, tx, fin, now)
	} else {
		c := out.Result
		c.Scope, c.Key, c.FencingToken = p.Scope, p.Key, fence
		var headers []byte
		if headers, err = json.Marshal(idem.FilterReplayedHeaders(c.Headers)); err == nil {
			res.Attempt, err = completeTx(ctx, tx, c, headers, now)
			res.Attempt = res.Attempt.Observe(now)
		}
	}
	if err == nil {
		err = tx.Commit(ctx)
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
