package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/appended"
)

// The statements of executions and their events; their files in sql/
// say what they take and return.
var (
	getExecutionSQL   = statement("get_execution")
	listEventsSQL     = statement("list_events")
	listExecutionsSQL = statement("list_executions")
	// startExecutionSQL and startApprovedExecutionSQL start an unkeyed
	// execution, the second consuming an approval first.
	startExecutionSQL         = statement("start_execution")
	startApprovedExecutionSQL = statement("start_execution_with_approval")
	// finishExecutionSQL records an execution's outcome and appends its
	// own events.
	finishExecutionSQL = statement("finish_execution")
	// returnApprovalSQL gives back an approval the execution consumed
	// (FinishParams.ReturnApproval).
	returnApprovalSQL = statement("return_approval")
	// appendEventSQL appends one event, insertEventsSQL any number (AppendEvents).
	appendEventSQL  = section("append_events", "one")
	insertEventsSQL = section("append_events", "many")
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

// GetExecution reads an execution, with its own events and those
// appended later merged in the order they were written, in one round
// trip.
func (s *Store) GetExecution(ctx context.Context, p idem.GetExecutionParams) (idem.Execution, error) {
	var x idem.Execution
	err := s.inTx(ctx, "get execution", func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue(getExecutionSQL, p.Org, p.ID)
		b.Queue(listEventsSQL, p.Org, p.ID)
		br := tx.SendBatch(ctx, &b)
		defer br.Close()
		var events []byte
		var err error
		x, err = scanExecution(br.QueryRow(), &events)
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.Errorf(idem.CodeNotFound, "no execution %q", p.ID)
		}
		if err != nil {
			return err
		}
		own, err := decodeEvents(events, x.ID)
		if err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		extra, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (appended.Event, error) { return scanEvent(row, x.ID) })
		if err != nil {
			return err
		}
		x.Events = appended.Merge(own, extra)
		return br.Close()
	})
	if err != nil {
		return idem.Execution{}, err
	}
	return x, nil
}

// startExecution starts an unkeyed execution in tx as StartExecution does:
// one statement. An approval that is not consumable is
// ErrApprovalNotConsumable, and nothing is written.
func startExecution(ctx context.Context, tx pgx.Tx, p idem.StartParams, now time.Time) (idem.Execution, error) {
	x := newExecution(p, "", now)
	events, err := encodeEvents(x.Events, now)
	if err != nil {
		return idem.Execution{}, err
	}
	q, args := startExecutionSQL, []any{p.Scope.Org, p.Scope.Principal, p.Operation, p.Fingerprint, p.ExecutionID, now, events}
	if p.ApprovalID != "" {
		q, args = startApprovedExecutionSQL, append(args, p.ApprovalID)
	}
	var consumed bool
	if err := tx.QueryRow(ctx, q, args...).Scan(&consumed, &x.ReinvocationOf); err != nil {
		return idem.Execution{}, err
	}
	if !consumed {
		return idem.Execution{}, idem.ErrApprovalNotConsumable
	}
	return x, nil
}

// newExecution is the execution that starting one inserts
// (start_execution.sql, reserve.sql and their approval forms), as read
// back, without its reinvocation_of.
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

// finishExecution records an unkeyed (or fenced) execution's outcome and
// appends its events, its own to its record in one statement, any naming
// another execution as rows after it (NOT_FOUND, and the caller rolls
// back, when one does not exist).
func finishExecution(ctx context.Context, tx pgx.Tx, p idem.FinishParams, now time.Time) error {
	own, others := splitEvents(p.Events, p.ExecutionID)
	events, err := encodeEvents(own, now)
	if err != nil {
		return err
	}
	var b pgx.Batch
	b.Queue(finishExecutionSQL, p.Org, p.ExecutionID, string(p.Outcome), nullable(string(p.Code)), p.Attempts, now, events)
	if err := queueEvents(&b, p.Org, others, now); err != nil {
		return err
	}
	if p.ReturnApproval != "" {
		b.Queue(returnApprovalSQL, p.Org, p.ReturnApproval, p.ExecutionID)
	}
	br := tx.SendBatch(ctx, &b) // through tx's own SendBatch: a pipelined one adds its statements
	defer br.Close()
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return idem.Errorf(idem.CodeNotFound, "no execution %q", p.ExecutionID)
	}
	if err := readEvents(br, others); err != nil {
		return err
	}
	if p.ReturnApproval != "" {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
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

// manyEvents is where appending events switches from a statement per
// event to one statement for all: measured, the single statement (arrays,
// a CTE) costs more than two plain inserts, and far less than hundreds
// (the replay events the runner drains in batches).
const manyEvents = 4

// queueEvents queues the statements that append events (none for none).
func queueEvents(batch *pgx.Batch, org string, events []idem.AuditEvent, now time.Time) error {
	if len(events) == 0 {
		return nil
	}
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
			batch.Queue(appendEventSQL, org, ev.ExecutionID, ev.Type, at, nullable(ev.Attempt), nullable(string(ev.Code)),
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

// scanEvent reads one appended event of execution id (list_events.sql).
func scanEvent(row pgx.CollectableRow, id string) (appended.Event, error) {
	var (
		a                  appended.Event
		at                 time.Time
		code, previousCode string
		data               []byte
	)
	ev := &a.Event
	err := row.Scan(&a.Pos, &ev.Type, &at, &ev.Attempt, &code, &previousCode, &ev.Attempts, &ev.DurationMs, &data)
	if err != nil {
		return appended.Event{}, err
	}
	ev.ExecutionID, ev.At, ev.Code, ev.PreviousErrorCode = id, at.UTC(), idem.Code(code), idem.Code(previousCode)
	if data != nil {
		if err := json.Unmarshal(data, &ev.Data); err != nil {
			return appended.Event{}, err
		}
	}
	return a, nil
}

// ListExecutions reads an org's executions, newest first, without events.
func (s *Store) ListExecutions(ctx context.Context, p idem.ListExecutionsParams) ([]idem.Execution, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	out := []idem.Execution{}
	err := s.inTx(ctx, "list executions", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, listExecutionsSQL, p.Org, p.Principal, p.Operation, string(p.Outcome), limit)
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

// scanExecution reads one execution (without events): org, id,
// principal, operation, fingerprint, key, attempts, outcome, code,
// reinvocation_of, started_at, finished_at, then the columns of more.
func scanExecution(row scanner, more ...any) (idem.Execution, error) {
	var (
		x                         idem.Execution
		key, code, reinvocationOf *string
		outcome                   string
		started, finished         *time.Time
	)
	if err := row.Scan(append([]any{&x.Org, &x.ID, &x.Principal, &x.Operation, &x.Fingerprint, &key, &x.Attempts, &outcome, &code,
		&reinvocationOf, &started, &finished}, more...)...); err != nil {
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

// recordExecutionsSQL inserts finished executions, one statement for all.
var recordExecutionsSQL = statement("record_executions")

// RecordExecutions implements idem.Store: one statement, in the group
// commit of the other writes. Events naming another execution are
// appended to it in the same transaction.
func (s *Store) RecordExecutions(ctx context.Context, p idem.RecordExecutionsParams) error {
	if len(p.Executions) == 0 {
		return nil
	}
	return s.write(ctx, "record executions", func(ctx context.Context, tx pgx.Tx) error {
		now := s.now()
		n := len(p.Executions)
		var (
			orgs, ids, principals, operations, fingerprints = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			attempts                                        = make([]int, n)
			outcomes, events                                = make([]string, n), make([]string, n)
			codes, previous                                 = make([]*string, n), make([]*string, n)
			started, finished                               = make([]time.Time, n), make([]time.Time, n)
			others                                          []orgEvents
		)
		last := map[[4]string]string{} // the last execution of each intent so far
		for i, e := range p.Executions {
			st, fin := e.Start, e.Finish
			orgs[i], ids[i], principals[i], operations[i], fingerprints[i] = st.Scope.Org, st.ExecutionID, st.Scope.Principal, st.Operation, st.Fingerprint
			attempts[i], outcomes[i], codes[i] = fin.Attempts, string(fin.Outcome), nullable(string(fin.Code))
			started[i], finished[i] = orDefault(e.StartedAt, now), orDefault(e.FinishedAt, now)
			intent := [4]string{st.Scope.Org, st.Scope.Principal, st.Operation, st.Fingerprint}
			if id, ok := last[intent]; ok {
				previous[i] = &id
			}
			last[intent] = st.ExecutionID
			own, foreign := splitEvents(fin.Events, st.ExecutionID)
			if foreign != nil {
				others = append(others, orgEvents{st.Scope.Org, foreign})
			}
			b, err := encodeEvents(append(newExecution(st, "", started[i]).Events, own...), now)
			if err != nil {
				return err
			}
			events[i] = string(b)
		}
		if _, err := tx.Exec(ctx, recordExecutionsSQL, orgs, ids, principals, operations, fingerprints, attempts, outcomes, codes,
			started, finished, events, previous); err != nil {
			return err
		}
		for _, o := range others {
			if err := insertEvents(ctx, tx, o.org, o.events, now); err != nil {
				return err
			}
		}
		return nil
	})
}

// orgEvents are events of executions of org.
type orgEvents struct {
	org    string
	events []idem.AuditEvent
}

// orDefault is t, or d when t is zero.
func orDefault(t, d time.Time) time.Time {
	if t.IsZero() {
		return d
	}
	return t
}
