package pgstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/groupcommit"
)

// InterpretError is the store's error translation, for table tests.
var InterpretError = interpretError

// SetFenceIdleTimeout shortens how long a fenced transaction may sit idle;
// it returns the function that restores it.
func SetFenceIdleTimeout(d time.Duration) (restore func()) {
	old := fenceIdleTimeout
	fenceIdleTimeout = d
	return func() { fenceIdleTimeout = old }
}

// SetSettleWait changes how long s waits for a fenced effect before it
// answers a record past its lease as still in flight.
func SetSettleWait(s *Store, d time.Duration) { s.settleWait = d }

// OpenWithLocalClock is Open with local as the instance's own clock, the
// one the database's clock is measured against (tests skew it).
func OpenWithLocalClock(ctx context.Context, url string, local func() time.Time) (*Store, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	s, err := newStore(ctx, pool, idem.StoreConfig{}, local)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// KeyLockSeed is the seed of the key's advisory lock, for tests that hold
// it as another transaction would.
const KeyLockSeed = keyLockSeed

// SetCompletionWorkers gives s's completions n workers instead of
// writeWorkers, before s is used.
func SetCompletionWorkers(s *Store, n int) {
	s.completions.Close()
	s.completions = groupcommit.NewBatcher(s.runTx, s.completeSet, groupcommit.Config{Workers: n, MaxBatch: maxBatch})
}

// QueuedCompletions is how many Complete calls wait for a worker.
func QueuedCompletions(s *Store) int { return s.completions.Queued() }

// CompleteSet completes ps in one transaction as one batch of s's
// completions would (completeSet).
func CompleteSet(ctx context.Context, s *Store, ps []idem.CompleteParams) ([]idem.Attempt, []error, error) {
	cs := make([]completion, len(ps))
	for i, p := range ps {
		headers, err := json.Marshal(idem.FilterReplayedHeaders(p.Headers))
		if err != nil {
			return nil, nil, err
		}
		cs[i] = completion{p, headers}
	}
	var as []idem.Attempt
	var errs []error
	err := s.runTx(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		as, errs, err = s.completeSet(ctx, tx, cs)
		return err
	})
	return as, errs, err
}

// HotStatements are the statements a call sends on the hot path, and the
// sweeper's, by name, for the tests of their plans.
var HotStatements = map[string]string{
	"peek": peekSQL, "insert_final": finalSQL, "reserve": reserveSQL, "reserve_with_approval": reserveApprovedSQL,
	"get_attempt": getAttemptSQL, "get_attempt_by_token": getAttemptByTokenSQL, "complete_attempt": completeSQL,
	"complete_set": completeSetSQL, "mark_indeterminate": markIndeterminateSQL, "release": releaseSQL, "watch": watchSQL,
	"start_execution": startExecutionSQL, "start_execution_with_approval": startApprovedExecutionSQL,
	"finish_execution": finishExecutionSQL, "get_execution": getExecutionSQL, "list_events": listEventsSQL,
	"append_events:one": appendEventSQL, "append_events:many": insertEventsSQL, "record_executions": recordExecutionsSQL,
	"get_approval:read": getApprovalSQL, "get_approval:for_update": lockApprovalSQL, "decide_approval": decideApprovalSQL,
	"get_live_approval": getLiveApprovalSQL, "check_fence": fenceSQL,
}

func init() {
	for _, step := range append(sweepSteps, auditSweepSteps...) {
		HotStatements["sweep: "+step.name] = step.sql
	}
}
