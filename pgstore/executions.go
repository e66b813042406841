package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"idem"
)

// StartExecution consumes p.ApprovalID if set and starts an unkeyed
// execution.
func (s *Store) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	var x idem.Execution
	err := s.write(ctx, "start execution", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		x, err = startExecution(ctx, tx, p, "", s.now())
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
		return finishExecution(ctx, tx, p, s.now(), "")
	})
}

// AppendEvents appends events to executions of org; an event naming an
// unknown execution (or another org's) fails the call with NOT_FOUND and
// nothing is written.
func (s *Store) AppendEvents(ctx context.Context, org string, events ...idem.AuditEvent) error {
	return s.write(ctx, "append events", func(ctx context.Context, tx pgx.Tx) error {
		return insertEvents(ctx, tx, org, events, s.now())
	})
}

// GetExecution reads an execution and its events in order.
func (s *Store) GetExecution(ctx context.Context, org, id string) (idem.Execution, error) {
	var x idem.Execution
	err := s.inTx(ctx, "get execution", func(tx pgx.Tx) error {
		var err error
		x, err = scanExecution(tx.QueryRow(ctx, `SELECT `+executionColumns+`
			FROM idem_executions WHERE org = $1 AND id = $2`, org, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.Errorf(idem.CodeNotFound, "no execution %q", id)
		}
		if err != nil {
			return err
		}

		rows, err := tx.Query(ctx, `SELECT execution_id, type, at, COALESCE(attempt, 0), COALESCE(code, ''),
				COALESCE(previous_error_code, ''), COALESCE(attempts, 0), COALESCE(duration_ms, 0), data
			FROM idem_audit_events WHERE org = $1 AND execution_id = $2 ORDER BY id`, org, id)
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

// startExecution consumes p.ApprovalID if set (ErrApprovalNotConsumable
// unless it is approved, unexpired and bound to this intent; the row lock
// makes concurrent consumers queue, and all but the first find it consumed),
// then inserts the execution, linked to the most recent earlier execution of
// the same intent, with its execution.started event.
func startExecution(ctx context.Context, tx pgx.Tx, p idem.StartParams, key string, now time.Time) (idem.Execution, error) {
	x := idem.Execution{
		ID: p.ExecutionID, Org: p.Scope.Org, Operation: p.Operation, Principal: p.Scope.Principal,
		Fingerprint: p.Fingerprint, Key: key, Attempts: 1, Outcome: idem.OutcomeRunning, StartedAt: now,
	}
	x.Events = []idem.AuditEvent{{ExecutionID: x.ID, Type: idem.EventStarted, At: now, Attempt: 1}}
	if p.ApprovalID != "" {
		x.Events = append(x.Events, idem.AuditEvent{ExecutionID: x.ID, Type: idem.EventApprovalConsumed, At: now,
			Data: map[string]string{"approvalId": p.ApprovalID}})
	}
	// One round trip: the statements are pipelined, and read back in order.
	batch := &pgx.Batch{}
	if p.ApprovalID != "" {
		batch.Queue(`UPDATE idem_approvals SET status = 'consumed', consumed_at = $6, execution_id = $7
			WHERE org = $1 AND id = $2 AND requested_by = $3 AND operation = $4 AND fingerprint = $5
				AND status = 'approved' AND expires_at > $6`,
			p.Scope.Org, p.ApprovalID, p.Scope.Principal, p.Operation, p.Fingerprint, now, p.ExecutionID)
	}
	batch.Queue(`INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key,
			attempts, outcome, reinvocation_of, started_at)
		VALUES ($1, $2, $3, $4, $5, $6, 1, 'running', (
			SELECT id FROM idem_executions
			WHERE org = $1 AND principal = $3 AND operation = $4 AND fingerprint = $5
			ORDER BY started_at DESC, seq DESC LIMIT 1), $7)
		RETURNING reinvocation_of`,
		x.Org, x.ID, x.Principal, x.Operation, x.Fingerprint, nullable(key), now)
	if err := queueEvents(batch, x.Org, x.Events, now); err != nil {
		return idem.Execution{}, err
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	if p.ApprovalID != "" {
		tag, err := results.Exec()
		if err != nil {
			return idem.Execution{}, err
		}
		if tag.RowsAffected() == 0 {
			// The execution and events queued behind it are rolled back
			// with the transaction.
			return idem.Execution{}, idem.ErrApprovalNotConsumable
		}
	}
	if err := results.QueryRow().Scan(&x.ReinvocationOf); err != nil {
		return idem.Execution{}, err
	}
	if err := readEvents(results, x.Events); err != nil {
		return idem.Execution{}, err
	}
	return x, results.Close()
}

// finishExecution records an execution's outcome and appends its events;
// events without an execution id get p's; a non-empty notify is signalled
// on idem_completed when the transaction commits. One round trip.
func finishExecution(ctx context.Context, tx pgx.Tx, p idem.FinishParams, now time.Time, notify string) error {
	events := make([]idem.AuditEvent, len(p.Events))
	for i, ev := range p.Events {
		if ev.ExecutionID == "" {
			ev.ExecutionID = p.ExecutionID
		}
		events[i] = ev
	}
	batch := &pgx.Batch{}
	batch.Queue(`UPDATE idem_executions SET outcome = $3, code = $4, attempts = $5, finished_at = $6
		WHERE org = $1 AND id = $2`,
		p.Org, p.ExecutionID, string(p.Outcome), nullable(string(p.Code)), p.Attempts, now)
	if err := queueEvents(batch, p.Org, events, now); err != nil {
		return err
	}
	if notify != "" {
		batch.Queue(`SELECT pg_notify('`+completedChannel+`', $1)`, notify)
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	tag, err := results.Exec()
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return idem.Errorf(idem.CodeNotFound, "no execution %q", p.ExecutionID)
	}
	if err := readEvents(results, events); err != nil {
		return err
	}
	if notify != "" {
		if _, err := results.Exec(); err != nil {
			return err
		}
	}
	return results.Close()
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
