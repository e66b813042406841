package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// A batch of concurrent completions is one statement: Complete queues its
// call on s.completions (a groupcommit.Batcher), whose workers hand what
// is queued to completeSet in one transaction, so that N completions pay
// one statement's start-up and one round trip. A lone completion runs
// completeSQL.

// completion is one Complete call as completeSet takes it; headers are
// p.Headers filtered and encoded.
type completion struct {
	p       idem.CompleteParams
	headers []byte
}

// errNotCompleted is a call's error from completeSet when the set
// statement did not complete its record: it is fenced, or one of its
// events names an execution other than its record's, or its record
// changed under the statement. Complete then runs it alone through
// completeSQL, whose answer is the caller's (ErrFenced, or the events
// appended to that other execution, or NOT_FOUND): all are rare, and the
// set statement stays free of the reads that would tell them apart.
var errNotCompleted = errors.New("pgstore: not completed in the set of completions")

// ownEvents reports whether every event of p names no execution or the
// one p says it finishes: such a call may go in a set of completions (the
// statement checks that it is the record's).
func ownEvents(p idem.CompleteParams) bool {
	for _, ev := range p.Finish.Events {
		if ev.ExecutionID != "" && ev.ExecutionID != p.Finish.ExecutionID {
			return false
		}
	}
	return true
}

// completeSetSQL completes a set of records, each under its own fence,
// and finishes their executions, in one statement. A call whose record is
// fenced, or whose events name another execution than the record's,
// writes nothing, and its failure is never its neighbours'.
var completeSetSQL = statement("complete_set")

// completeSet completes cs in tx as Complete does each, in one round trip
// and one statement (completeSetSQL) when there are several, with
// completeSQL when there is one. A call the set statement
// did not complete gets errNotCompleted and wrote nothing; the others are
// completed. It is the set function of s.completions.
func (s *Store) completeSet(ctx context.Context, tx pgx.Tx, cs []completion) ([]idem.Attempt, []error, error) {
	now := s.now() // when it runs: the leases are checked against it
	if len(cs) == 1 {
		a, err := completeTx(ctx, tx, cs[0].p, cs[0].headers, now)
		if err != nil {
			return nil, nil, err
		}
		return []idem.Attempt{a.Observe(now)}, []error{nil}, nil
	}
	args, err := completeSetArgs(cs, now)
	if err != nil {
		return nil, nil, err
	}
	rows, err := tx.Query(ctx, completeSetSQL, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	as, errs := make([]idem.Attempt, len(cs)), make([]error, len(cs))
	for i := range errs {
		errs[i] = errNotCompleted
	}
	// notified is read only so that the NOTIFY CTE runs.
	var n, notified int
	for rows.Next() {
		a, err := scanAttempt(prefixed{rows, []any{&n, &notified}})
		if err != nil {
			return nil, nil, err
		}
		if n < 1 || n > len(cs) || errs[n-1] == nil {
			return nil, nil, fmt.Errorf("pgstore: completion %d of %d answered twice or unknown", n, len(cs))
		}
		as[n-1], errs[n-1] = a.Observe(now), nil
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return as, errs, nil
}

// completeSetArgs lays cs out as completeSetSQL's parameters.
func completeSetArgs(cs []completion, now time.Time) ([]any, error) {
	n := len(cs)
	var (
		orgs, principals, keys = make([]string, n), make([]string, n), make([]string, n)
		tokens                 = make([]int64, n)
		states, headers        = make([]string, n), make([]string, n)
		statuses, attempts     = make([]int, n), make([]int, n)
		bodies                 = make([][]byte, n)
		sealed, codes, named   = make([]*string, n), make([]*string, n), make([]*string, n)
		secret                 = make([]*time.Time, n)
		outcomes, payloads     = make([]string, n), make([]string, n)
		events                 = make([]string, n)
	)
	for i, c := range cs {
		p := c.p
		orgs[i], principals[i], keys[i], tokens[i] = p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken
		states[i], statuses[i], headers[i], bodies[i] = string(idem.FinalState(p.Status)), p.Status, string(c.headers), p.Body
		sealed[i] = nullable(p.SealedKeyID)
		if p.SealedKeyID != "" {
			t := now.Add(p.SecretWindow)
			secret[i] = &t
		}
		outcomes[i], codes[i], attempts[i] = string(p.Finish.Outcome), nullable(string(p.Finish.Code)), p.Finish.Attempts
		payloads[i] = notifyPayload(p.Scope, p.Key) // signalled only if a waiter on another instance asked (Watch)
		for _, ev := range p.Finish.Events {
			if ev.ExecutionID != "" {
				named[i] = &p.Finish.ExecutionID // ownEvents: the only one they name
			}
		}
		b, err := encodeEvents(p.Finish.Events, now)
		if err != nil {
			return nil, err
		}
		events[i] = string(b)
	}
	return []any{orgs, principals, keys, tokens, states, statuses, headers, bodies, sealed, secret,
		outcomes, codes, attempts, payloads, named, events, now}, nil
}
