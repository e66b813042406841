package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// StartExecution consumes p.ApprovalID if set and starts an unkeyed
// execution.
func (s *Store) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	var x idem.Execution
	err := s.write(ctx, "start execution", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		x, err = startExecution(ctx, tx, p, s.now())
		return err
	})
	if err != nil {
		return idem.Execution{}, err
	}
	return x, nil
}

// FinishExecution records the outcome and appends the final events.
func (s *Store) FinishExecution(ctx context.Context, p idem.FinishParams) error {
	return s.write(ctx, "finish execution", func(ctx context.Context, tx pgx.Tx) error {
		return finishExecution(ctx, tx, p, s.now())
	})
}

// AppendEvents appends p.Events to executions of p.Org; an event naming an
// unknown execution (or another org's) fails the call with NOT_FOUND and
// nothing is written.
func (s *Store) AppendEvents(ctx context.Context, p idem.AppendEventsParams) error {
	return s.write(ctx, "append events", func(ctx context.Context, tx pgx.Tx) error {
		return insertEvents(ctx, tx, p.Org, p.Events, s.now())
	})
}

// GetExecution reads an execution and its events in order.
func (s *Store) GetExecution(ctx context.Context, p idem.GetExecutionParams) (idem.Execution, error) {
	var x idem.Execution
	err := s.inTx(ctx, "get execution", func(tx pgx.Tx) error {
		var err error
		x, err = scanExecution(tx.QueryRow(ctx, `SELECT `+executionColumns+`
			FROM idem_executions WHERE org = $1 AND id = $2`, p.Org, p.ID))
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.Errorf(idem.CodeNotFound, "no execution %q", p.ID)
		}
		if err != nil {
			return err
		}

		rows, err := tx.Query(ctx, `SELECT execution_id, type, at, COALESCE(attempt, 0), COALESCE(code, ''),
				COALESCE(previous_error_code, ''), COALESCE(attempts, 0), COALESCE(duration_ms, 0), data
			FROM idem_audit_events WHERE org = $1 AND execution_id = $2 ORDER BY id`, p.Org, p.ID)
		if err != nil {
			return err
		}
		x.Events, err = pgx.CollectRows(rows, scanEvent)
		return err
	})
	if err != nil {
		return idem.Execution{}, err
	}
	return x, nil
}

// startPlaceholders names the parameters (or SQL expressions) of an
// execution's start in the statement that embeds it.
type startPlaceholders struct {
	org, principal, key, operation, fingerprint, id, now, approval string
}

// startCTEs are the CTEs "consumed" (only when approval), "exe" and
// "started" that start an execution: consume the approval (approved,
// unexpired and bound to this intent; the row lock makes concurrent
// consumers queue, and all but the first find it consumed), insert the
// execution, linked to the most recent earlier execution of the same
// intent, and its execution.started (and approval.consumed) events. Each
// writes only when gate (an SQL condition) holds and the approval, if
// any, was consumed; the statement reads whether it was from "consumed".
func startCTEs(ph startPlaceholders, approval bool, gate string) string {
	consume, startGate := "", gate
	events := fmt.Sprintf(`(1, '%s'::text, 1::int, NULL::jsonb)`, idem.EventStarted)
	if approval {
		consume = fmt.Sprintf(`consumed AS (
		UPDATE idem_approvals SET status = 'consumed', consumed_at = %[1]s, execution_id = %[2]s
		WHERE org = %[3]s AND id = %[4]s AND requested_by = %[5]s AND operation = %[6]s AND fingerprint = %[7]s
			AND status = 'approved' AND expires_at > %[1]s AND %[8]s
		RETURNING 1),
	`, ph.now, ph.id, ph.org, ph.approval, ph.principal, ph.operation, ph.fingerprint, gate)
		startGate += ` AND EXISTS (SELECT FROM consumed)`
		events += fmt.Sprintf(`, (2, '%s', NULL, jsonb_build_object('approvalId', %s::text))`, idem.EventApprovalConsumed, ph.approval)
	}
	return consume + fmt.Sprintf(`exe AS (
		INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
			attempts, outcome, reinvocation_of, started_at)
		SELECT %[1]s, %[2]s, %[3]s, %[4]s, %[5]s, %[6]s, 1, 'running', `+previousExecution(ph.org, ph.principal, ph.operation, ph.fingerprint)+`, %[7]s
		WHERE %[8]s
		RETURNING reinvocation_of),
	started AS (
		INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, data)
		SELECT %[1]s, %[2]s, e.type, %[7]s, e.attempt, e.data
		FROM exe, (VALUES %[9]s) AS e(n, type, attempt, data)
		ORDER BY e.n
		RETURNING 1)`, ph.org, ph.id, ph.principal, ph.operation, ph.fingerprint, ph.key, ph.now, startGate, events)
}

// previousExecution is the subquery of the most recent execution of an
// intent (org, principal, operation, fingerprint): what a new execution of
// it is a reinvocation of (SPEC §13).
func previousExecution(org, principal, operation, fingerprint string) string {
	return `(SELECT id FROM idem_executions
			WHERE org = ` + org + ` AND principal = ` + principal + ` AND operation = ` + operation + ` AND fingerprint = ` + fingerprint + `
			ORDER BY started_at DESC, seq DESC LIMIT 1)`
}

// consumedColumn reads, in a statement with startCTEs, whether the
// approval (if any) was consumed.
func consumedColumn(approval bool) string {
	if approval {
		return `EXISTS (SELECT FROM consumed)`
	}
	return `true`
}

// startExecutionSQL starts an unkeyed execution in one statement ($1 org,
// $2 principal, $3 operation, $4 fingerprint, $5 execution id, $6 now, $7
// approval id, only with an approval); it returns whether the approval was
// consumed and the execution's reinvocation_of.
var startExecutionSQL = [2]string{startExecutionStatement(false), startExecutionStatement(true)}

func startExecutionStatement(approval bool) string {
	ph := startPlaceholders{org: "$1::text", principal: "$2::text", key: "NULL::text", operation: "$3::text",
		fingerprint: "$4::text", id: "$5::text", now: "$6::timestamptz", approval: "$7::text"}
	return `WITH ` + startCTEs(ph, approval, "true") + `
	SELECT ` + consumedColumn(approval) + `, (SELECT reinvocation_of FROM exe)`
}

// startExecution starts an unkeyed execution in tx as StartExecution does:
// one statement. An approval that is not consumable is
// ErrApprovalNotConsumable, and nothing is written.
func startExecution(ctx context.Context, tx pgx.Tx, p idem.StartParams, now time.Time) (idem.Execution, error) {
	args := []any{p.Scope.Org, p.Scope.Principal, p.Operation, p.Fingerprint, p.ExecutionID, now}
	approval := p.ApprovalID != ""
	if approval {
		args = append(args, p.ApprovalID)
	}
	x := newExecution(p, "", now)
	var consumed bool
	if err := tx.QueryRow(ctx, startExecutionSQL[b2i(approval)], args...).Scan(&consumed, &x.ReinvocationOf); err != nil {
		return idem.Execution{}, err
	}
	if !consumed {
		return idem.Execution{}, idem.ErrApprovalNotConsumable
	}
	return x, nil
}

// newExecution is the execution startCTEs insert, as read back, without
// its reinvocation_of.
func newExecution(p idem.StartParams, key string, now time.Time) idem.Execution {
	x := idem.Execution{
		ID: p.ExecutionID, Org: p.Scope.Org, Operation: p.Operation, Principal: p.Scope.Principal,
		Fingerprint: p.Fingerprint, Key: key, Attempts: 1, Outcome: idem.OutcomeRunning, StartedAt: now,
	}
	x.Events = []idem.AuditEvent{{ExecutionID: x.ID, Type: idem.EventStarted, At: now, Attempt: 1}}
	if p.ApprovalID != "" {
		x.Events = append(x.Events, idem.AuditEvent{ExecutionID: x.ID, Type: idem.EventApprovalConsumed, At: now,
			Data: map[string]string{"approvalId": p.ApprovalID}})
	}
	return x
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// finishPlaceholders names the parameters of an execution's finish in
// the statement that embeds it; events is the first of its events'.
type finishPlaceholders struct {
	org, id, outcome, code, attempts, now string
	events                                int
}

// finishCTEs are the CTEs "fin", "e" and "ev" that finish an execution:
// record its outcome, then append n events (their parameters from
// ph.events, as eventArgs lays them out), all or none: each names its
// execution or, when NULL, the finished one, which must exist in org;
// "e" marks the events whose execution does not (not known).
func finishCTEs(ph finishPlaceholders, n int) string {
	var rows string
	switch {
	case n == 0:
		rows = `(SELECT NULL::bigint, NULL::text, NULL::text, NULL::timestamptz, NULL::int, NULL::text, NULL::text,
			NULL::int, NULL::bigint, NULL::jsonb WHERE false)`
	case n <= manyEvents:
		var vs []string
		for i := range n {
			k := ph.events + i*eventParams
			vs = append(vs, fmt.Sprintf(`(%d, $%d::text, $%d::text, $%d::timestamptz, $%d::int, $%d::text, $%d::text, $%d::int, $%d::bigint, $%d::jsonb)`,
				i+1, k, k+1, k+2, k+3, k+4, k+5, k+6, k+7, k+8))
		}
		rows = `(VALUES ` + strings.Join(vs, ", ") + `)`
	default:
		k := ph.events
		rows = fmt.Sprintf(`(SELECT n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data::jsonb
			FROM unnest($%d::text[], $%d::text[], $%d::timestamptz[], $%d::int[], $%d::text[], $%d::text[], $%d::int[], $%d::bigint[], $%d::text[])
			WITH ORDINALITY AS u(execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, n))`,
			k, k+1, k+2, k+3, k+4, k+5, k+6, k+7, k+8)
	}
	return fmt.Sprintf(`fin AS (
		UPDATE idem_executions x SET outcome = %[3]s, code = %[4]s, attempts = %[5]s, finished_at = %[6]s
		WHERE x.org = %[1]s AND x.id = %[2]s
		RETURNING x.id),
	e AS (
		SELECT r.*, COALESCE(r.execution_id, fin.id) AS xid,
			r.execution_id IS NULL OR r.execution_id = fin.id
				OR EXISTS (SELECT FROM idem_executions k WHERE k.org = %[1]s AND k.id = r.execution_id) AS known
		FROM fin, %[7]s AS r(n, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)),
	ev AS (
		INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
			attempts, duration_ms, data)
		SELECT %[1]s, xid, type, at, attempt, code, previous_error_code, attempts, duration_ms, data
		FROM e WHERE NOT EXISTS (SELECT FROM e WHERE NOT known) ORDER BY n
		RETURNING 1)`, ph.org, ph.id, ph.outcome, ph.code, ph.attempts, ph.now, rows)
}

// finishColumns read, in a statement with finishCTEs, whether the
// execution was found, how many events were appended, and the first
// unknown execution an event named.
const finishColumns = `(SELECT count(*) FROM fin), (SELECT count(*) FROM ev),
	(SELECT xid FROM e WHERE NOT known ORDER BY n LIMIT 1)`

// finishResult is what finishColumns read.
type finishResult struct {
	finished, appended int
	unknown            *string
}

func (r *finishResult) dest() []any { return []any{&r.finished, &r.appended, &r.unknown} }

// check turns r into the error finishing execution id with n events
// meets: NOT_FOUND for an unknown execution.
func (r *finishResult) check(id string, n int) error {
	switch {
	case r.finished == 0:
		return idem.Errorf(idem.CodeNotFound, "no execution %q", id)
	case r.unknown != nil:
		return idem.Errorf(idem.CodeNotFound, "no execution %q", *r.unknown)
	case r.appended != n:
		return fmt.Errorf("pgstore: %d of %d events inserted", r.appended, n)
	}
	return nil
}

// eventParams is how many parameters an event takes in finishCTEs.
const eventParams = 9

// eventSQLVariant is the index, among statements built for 0 to
// manyEvents events and one for more, of the statement for n events.
func eventSQLVariant(n int) int { return min(n, manyEvents+1) }

// finishExecutionSQL finishes an execution in one statement ($1 org, $2
// id, $3 outcome, $4 code, $5 attempts, $6 now, then the events), by
// eventSQLVariant.
var finishExecutionSQL = func() (qs [manyEvents + 2]string) {
	ph := finishPlaceholders{org: "$1::text", id: "$2::text", outcome: "$3::text", code: "$4::text",
		attempts: "$5::int", now: "$6::timestamptz", events: 7}
	for n := range qs {
		qs[n] = `WITH ` + finishCTEs(ph, n) + `
	SELECT ` + finishColumns
	}
	return qs
}()

// finishExecution records an unkeyed (or fenced) execution's outcome and
// appends its events, in one statement; events without an execution id
// get p's.
func finishExecution(ctx context.Context, tx pgx.Tx, p idem.FinishParams, now time.Time) error {
	args := []any{p.Org, p.ExecutionID, string(p.Outcome), nullable(string(p.Code)), p.Attempts, now}
	args, err := appendEventArgs(args, p.Events, now)
	if err != nil {
		return err
	}
	var r finishResult
	if err := tx.QueryRow(ctx, finishExecutionSQL[eventSQLVariant(len(p.Events))], args...).Scan(r.dest()...); err != nil {
		return err
	}
	return r.check(p.ExecutionID, len(p.Events))
}

// appendEventArgs appends the parameters of events as finishCTEs reads
// them: eventParams per event, or arrays beyond manyEvents. An event
// without an execution id names the finished one (NULL); one without a
// time happens now.
func appendEventArgs(args []any, events []idem.AuditEvent, now time.Time) ([]any, error) {
	n := len(events)
	if n <= manyEvents {
		for _, ev := range events {
			at := ev.At
			if at.IsZero() {
				at = now
			}
			data, err := eventData(ev)
			if err != nil {
				return nil, err
			}
			args = append(args, nullable(ev.ExecutionID), ev.Type, at, nullable(ev.Attempt), nullable(string(ev.Code)),
				nullable(string(ev.PreviousErrorCode)), nullable(ev.Attempts), nullable(ev.DurationMs), data)
		}
		return args, nil
	}
	arrays, err := eventArrays(events, now)
	return append(args, arrays...), err
}

// eventArrays are the parameters of events as eventParams parallel arrays,
// the form finishCTEs reads beyond manyEvents: execution ids first.
func eventArrays(events []idem.AuditEvent, now time.Time) ([]any, error) {
	n := len(events)
	var (
		ids                     = make([]*string, n)
		types                   = make([]string, n)
		ats                     = make([]time.Time, n)
		attempt, attempts, durs = make([]*int64, n), make([]*int64, n), make([]*int64, n)
		codes, prev, data       = make([]*string, n), make([]*string, n), make([]*string, n)
	)
	for i, ev := range events {
		ids[i], types[i], ats[i] = nullable(ev.ExecutionID), ev.Type, ev.At
		if ats[i].IsZero() {
			ats[i] = now
		}
		attempt[i], attempts[i], durs[i] = nullable(int64(ev.Attempt)), nullable(int64(ev.Attempts)), nullable(ev.DurationMs)
		codes[i], prev[i] = nullable(string(ev.Code)), nullable(string(ev.PreviousErrorCode))
		d, err := eventData(ev)
		if err != nil {
			return nil, err
		}
		data[i] = d
	}
	return []any{ids, types, ats, attempt, codes, prev, attempts, durs, data}, nil
}

// insertEvents appends events in order, each only if its execution exists in
// org (else NOT_FOUND). An event without a time gets now.
func insertEvents(ctx context.Context, tx pgx.Tx, org string, events []idem.AuditEvent, now time.Time) error {
	if len(events) == 0 {
		return nil
	}
	batch := &pgx.Batch{}
	if err := queueEvents(batch, org, events, now); err != nil {
		return err
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	if err := readEvents(results, events); err != nil {
		return err
	}
	return results.Close()
}

// insertEventsSQL appends events from parallel arrays in one statement, in
// their order, but only if every event's execution exists in org ($1); it
// returns the first execution id that does not (NULL when all do) and how
// many rows it inserted.
const insertEventsSQL = `WITH e AS (
		SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::int8[], $6::text[], $7::text[],
			$8::int8[], $9::int8[], $10::text[])
			WITH ORDINALITY AS e(execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data, n)),
	missing AS (
		SELECT execution_id FROM e
		WHERE NOT EXISTS (SELECT 1 FROM idem_executions x WHERE x.org = $1 AND x.id = e.execution_id)
		ORDER BY n LIMIT 1),
	ins AS (
		INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code,
			attempts, duration_ms, data)
		SELECT $1, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data::jsonb
		FROM e WHERE NOT EXISTS (SELECT FROM missing) ORDER BY n
		RETURNING 1)
	SELECT (SELECT execution_id FROM missing), (SELECT count(*) FROM ins)`

// manyEvents is where appending events switches from a statement per
// event to one statement for all: measured, the single statement (arrays,
// a CTE) costs more than two plain inserts, and far less than hundreds
// (the replay events the runner drains in batches).
const manyEvents = 4

// queueEvents queues the statements that append events.
func queueEvents(batch *pgx.Batch, org string, events []idem.AuditEvent, now time.Time) error {
	if len(events) <= manyEvents {
		for _, ev := range events {
			at := ev.At
			if at.IsZero() {
				at = now
			}
			data, err := eventData(ev)
			if err != nil {
				return err
			}
			batch.Queue(`INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code,
					previous_error_code, attempts, duration_ms, data)
				SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb
				WHERE EXISTS (SELECT 1 FROM idem_executions WHERE org = $1 AND id = $2)`,
				org, ev.ExecutionID, ev.Type, at, nullable(ev.Attempt), nullable(string(ev.Code)),
				nullable(string(ev.PreviousErrorCode)), nullable(ev.Attempts), nullable(ev.DurationMs), data)
		}
		return nil
	}
	n := len(events)
	var (
		ids, types              = make([]string, n), make([]string, n)
		ats                     = make([]time.Time, n)
		attempt, attempts, durs = make([]*int64, n), make([]*int64, n), make([]*int64, n)
		codes, prev, data       = make([]*string, n), make([]*string, n), make([]*string, n)
	)
	for i, ev := range events {
		ids[i], types[i], ats[i] = ev.ExecutionID, ev.Type, ev.At
		if ats[i].IsZero() {
			ats[i] = now
		}
		attempt[i], attempts[i], durs[i] = nullable(int64(ev.Attempt)), nullable(int64(ev.Attempts)), nullable(ev.DurationMs)
		codes[i], prev[i] = nullable(string(ev.Code)), nullable(string(ev.PreviousErrorCode))
		d, err := eventData(ev)
		if err != nil {
			return err
		}
		data[i] = d
	}
	batch.Queue(insertEventsSQL, org, ids, types, ats, attempt, codes, prev, attempts, durs, data)
	return nil
}

// readEvents reads the results of queueEvents: NOT_FOUND when an event's
// execution does not exist.
func readEvents(results pgx.BatchResults, events []idem.AuditEvent) error {
	if len(events) <= manyEvents {
		for _, ev := range events {
			tag, err := results.Exec()
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return idem.Errorf(idem.CodeNotFound, "no execution %q", ev.ExecutionID)
			}
		}
		return nil
	}
	var missing *string
	var inserted int
	if err := results.QueryRow().Scan(&missing, &inserted); err != nil {
		return err
	}
	if missing != nil {
		return idem.Errorf(idem.CodeNotFound, "no execution %q", *missing)
	}
	if inserted != len(events) {
		return fmt.Errorf("pgstore: %d of %d events inserted", inserted, len(events))
	}
	return nil
}

// eventData is an event's data as JSON text, or nil.
func eventData(ev idem.AuditEvent) (*string, error) {
	if ev.Data == nil {
		return nil, nil
	}
	b, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// scanEvent reads one audit event row.
func scanEvent(row pgx.CollectableRow) (idem.AuditEvent, error) {
	var (
		ev                 idem.AuditEvent
		at                 time.Time
		code, previousCode string
		data               []byte
	)
	err := row.Scan(&ev.ExecutionID, &ev.Type, &at, &ev.Attempt, &code, &previousCode, &ev.Attempts, &ev.DurationMs, &data)
	if err != nil {
		return idem.AuditEvent{}, err
	}
	ev.At, ev.Code, ev.PreviousErrorCode = at.UTC(), idem.Code(code), idem.Code(previousCode)
	if data != nil {
		if err := json.Unmarshal(data, &ev.Data); err != nil {
			return idem.AuditEvent{}, err
		}
	}
	return ev, nil
}

// ListExecutions reads an org's executions, newest first, without events.
func (s *Store) ListExecutions(ctx context.Context, p idem.ListExecutionsParams) ([]idem.Execution, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	out := []idem.Execution{}
	err := s.inTx(ctx, "list executions", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+executionColumns+`
			FROM idem_executions
			WHERE org = $1 AND ($2 = '' OR principal = $2) AND ($3 = '' OR operation = $3) AND ($4 = '' OR outcome = $4)
			ORDER BY started_at DESC, seq DESC LIMIT $5`,
			p.Org, p.Principal, p.Operation, string(p.Outcome), limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (idem.Execution, error) { return scanExecution(row) })
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

const executionColumns = `org, id, principal, operation, fingerprint, key, attempts, outcome, code,
	reinvocation_of, started_at, finished_at`

// scanExecution reads one row of executionColumns (without events).
func scanExecution(row scanner) (idem.Execution, error) {
	var (
		x                         idem.Execution
		key, code, reinvocationOf *string
		outcome                   string
		started, finished         *time.Time
	)
	if err := row.Scan(&x.Org, &x.ID, &x.Principal, &x.Operation, &x.Fingerprint, &key, &x.Attempts, &outcome, &code,
		&reinvocationOf, &started, &finished); err != nil {
		return idem.Execution{}, err
	}
	if key != nil {
		x.Key = *key
	}
	if code != nil {
		c := idem.Code(*code)
		x.Code = &c
	}
	x.Outcome, x.ReinvocationOf = idem.Outcome(outcome), reinvocationOf
	x.StartedAt, x.FinishedAt = utc(started), utcPtr(finished)
	return x, nil
}
