package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// A batch of concurrent completions is one statement: Complete queues its
// call on s.completions (a groupcommit.Batcher), whose workers hand what
// is queued to completeSet in one transaction. Each statement on the
// partitioned tables pays a plan and an executor start-up on every
// partition (most of a completion's server CPU), so N completions in one
// set-based statement pay them once. A lone completion runs completeSQL,
// as before batching.

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

// completeSetSQL completes a set of records, each under its own fence, and
// finishes their executions, in one statement. u holds the calls, one row
// each, numbered n from parallel arrays ($1 org, $2 principal, $3 key, $4
// fencing token, $5 state, $6 status, $7 headers as JSON text, $8 body, $9
// sealed key id, $10 secret expiry, $11 outcome, $12 code, $13 attempts,
// $14 NOTIFY payload, $15 the execution its events name, if any); r holds
// all their events, flattened, each with the number of its call ($17) and
// then the arrays of eventArrays but the execution ids; $16 is now.
//
// done is the fenced UPDATE of every record: a call whose record is no
// longer in flight under its token and lease matches nothing and writes
// nothing, and neither does one whose events name another execution than
// the record's, so that a call's failure is never its neighbours'. It
// carries each call's finish along, so that fin, ev and notified (which
// finish the completed calls' executions, append their events in order
// and NOTIFY their watched records) read done alone, never u again: each
// join costs in proportion to the batch, not its square. The statement
// returns the completed records, by call number, and the counts of
// executions finished and events appended (an execution not found is a
// count short: the batch fails). The tables are as few as completeSQL's:
// each one more (a read telling the calls not completed apart, say) would
// cost every batch its partitions' planning and start-up.
var completeSetSQL = `WITH u AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::int[], $7::text[],
			$8::bytea[], $9::text[], $10::timestamptz[], $11::text[], $12::text[], $13::int[], $14::text[], $15::text[])
			WITH ORDINALITY AS u(org, principal, key, token, state, status, headers, body, sealed_key_id,
				secret_expires_at, outcome, code, attempts, payload, named, n)),
	done AS (
		UPDATE idem_attempts a SET
			state = u.state, status = u.status, headers = u.headers::jsonb, body = u.body,
			sealed_key_id = u.sealed_key_id, completed_at = $16, secret_expires_at = u.secret_expires_at
		FROM u
		WHERE a.org = u.org AND a.principal = u.principal AND a.key = u.key AND a.fencing_token = u.token
			AND a.state = 'in_flight' AND a.lease_expires_at > $16::timestamptz
			AND (u.named IS NULL OR u.named = a.execution_id)
		RETURNING u.n, u.outcome, u.code, u.attempts AS finish_attempts, u.payload, a.watched,
			` + qualified("a", attemptColumns) + `),
	fin AS (
		UPDATE idem_executions x SET outcome = done.outcome, code = done.code, attempts = done.finish_attempts,
			finished_at = $16
		FROM done
		WHERE x.org = done.org AND x.id = done.execution_id
		RETURNING 1),
	ev AS (
		INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
			attempts, duration_ms, data)
		SELECT done.org, done.execution_id, r.type, r.at, r.attempt, r.code, r.previous_error_code, r.attempts,
			r.duration_ms, r.data::jsonb
		FROM unnest($17::int8[], $18::text[], $19::timestamptz[], $20::int[], $21::text[], $22::text[], $23::int[],
				$24::int8[], $25::text[])
			WITH ORDINALITY AS r(call, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, m)
		JOIN done ON done.n = r.call
		ORDER BY r.m
		RETURNING 1),
	notified AS (SELECT pg_notify('` + completedChannel + `', payload) FROM done WHERE watched)
	SELECT n, (SELECT count(*) FROM fin), (SELECT count(*) FROM ev), (SELECT count(*) FROM notified),
		` + attemptColumns + `
	FROM done`

// genericPlanSQL makes completeSetSQL run on its generic plan, made once
// per connection (pgx prepares the statement). Left to choose, PostgreSQL
// would plan it afresh on every call, since a custom plan, which sees the
// arrays' lengths, always looks cheaper than the generic one (which
// guesses 100 rows), and planning the partitions of three tables costs
// more than running the statement. SET LOCAL ends with the transaction.
const genericPlanSQL = `SET LOCAL plan_cache_mode = force_generic_plan`

// qualified is the comma-separated columns cols, each prefixed with the
// table t.
func qualified(t, cols string) string {
	var out []string
	for c := range strings.SplitSeq(cols, ",") {
		out = append(out, t+"."+strings.TrimSpace(c))
	}
	return strings.Join(out, ", ")
}

// completeSet completes cs in tx as Complete does each, in one round trip
// and one statement (completeSetSQL, after genericPlanSQL) when there are
// several, with completeSQL when there is one. A call the set statement
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
	var b pgx.Batch
	b.Queue(genericPlanSQL)
	b.Queue(completeSetSQL, args...)
	br := tx.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	as, errs := make([]idem.Attempt, len(cs)), make([]error, len(cs))
	for i := range errs {
		errs[i] = errNotCompleted
	}
	// notified is read only so that the NOTIFY CTE runs.
	var n, finished, appended, notified, completed, events int
	for rows.Next() {
		a, err := scanAttempt(prefixed{rows, []any{&n, &finished, &appended, &notified}})
		if err != nil {
			return nil, nil, err
		}
		if n < 1 || n > len(cs) || errs[n-1] == nil {
			return nil, nil, fmt.Errorf("pgstore: completion %d of %d answered twice or unknown", n, len(cs))
		}
		as[n-1], errs[n-1] = a.Observe(now), nil
		completed++
		events += len(cs[n-1].p.Finish.Events)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if completed > 0 && (finished != completed || appended != events) {
		// An execution was not found: the batch is rolled back and every
		// call runs alone, with its own answer (NOT_FOUND for that one).
		return nil, nil, fmt.Errorf("pgstore: %d of %d executions finished, %d of %d events appended",
			finished, completed, appended, events)
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
		calls                  []int64
		evs                    []idem.AuditEvent
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
			calls = append(calls, int64(i+1))
			evs = append(evs, ev)
		}
	}
	arrays, err := eventArrays(evs, now)
	if err != nil {
		return nil, err
	}
	return append([]any{orgs, principals, keys, tokens, states, statuses, headers, bodies, sealed, secret,
		outcomes, codes, attempts, payloads, named, now, calls}, arrays[1:]...), nil
}
