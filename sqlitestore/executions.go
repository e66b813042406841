package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/appended"
)

// StartExecution implements idem.Store.
func (s *Store) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	var out idem.Execution
	err := s.write(ctx, "start execution", func(ctx context.Context, tx txn, now time.Time) (err error) {
		out, err = startExecution(ctx, tx, now, p)
		return err
	})
	return out, err
}

// FinishExecution implements idem.Store.
func (s *Store) FinishExecution(ctx context.Context, p idem.FinishParams) error {
	return s.write(ctx, "finish execution", func(ctx context.Context, tx txn, now time.Time) error {
		return finishExecution(ctx, tx, now, p)
	})
}

// AppendEvents implements idem.Store: one INSERT per execution named, of
// a row of idem_audit_events per event, in order, each after the events
// the record holds then (pos); the record itself is not written, so an
// append costs the same however many came before. An execution not found
// fails the call, whose savepoint takes back what it appended to the
// others.
func (s *Store) AppendEvents(ctx context.Context, p idem.AppendEventsParams) error {
	return s.write(ctx, "append events", func(ctx context.Context, tx txn, now time.Time) error {
		var order []string
		byExecution := map[string][]idem.AuditEvent{}
		for _, ev := range p.Events {
			if _, seen := byExecution[ev.ExecutionID]; !seen {
				order = append(order, ev.ExecutionID)
			}
			byExecution[ev.ExecutionID] = append(byExecution[ev.ExecutionID], ev)
		}
		for _, id := range order {
			events, err := encodeEvents(byExecution[id], now)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO idem_audit_events (org, execution_id, pos, event)
				SELECT r.org, r.id, json_array_length(r.events), e.value FROM idem_records r, json_each(?3) e
				WHERE r.org = ?1 AND r.id = ?2 ORDER BY e.key`,
				p.Org, id, events)
			if err := expectRow(res, err, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetExecution implements idem.Store: the record, and the events appended
// to it later placed among its own, in one statement.
func (s *Store) GetExecution(ctx context.Context, p idem.GetExecutionParams) (idem.Execution, error) {
	var x idem.Execution
	err := s.read(ctx, "get execution", func(tx txn, _ time.Time) error {
		var events string
		var extra sql.NullString
		var err error
		x, err = scanExecution(tx.QueryRowContext(ctx, `SELECT `+executionColumns+`, events, `+appendedEventsSQL+`
			FROM idem_records r WHERE org = ? AND id = ?`, p.Org, p.ID), &events, &extra)
		if errors.Is(err, sql.ErrNoRows) {
			return executionNotFound(p.ID)
		}
		if err != nil {
			return err
		}
		own, err := decodeEvents(x.ID, events)
		if err != nil {
			return err
		}
		if !extra.Valid {
			x.Events = own
			return nil
		}
		later, err := decodeAppended(x.ID, extra.String)
		x.Events = appended.Merge(own, later)
		return err
	})
	if err != nil {
		return idem.Execution{}, err
	}
	return x, nil
}

// appendedEventsSQL is the column of the events appended to the execution
// of row r of idem_records, in the order they were written, NULL for none:
// their positions, then ";", then a JSON array of them, decoded at once as
// the record's ("1,1,2;[{…},{…},{…}]").
const appendedEventsSQL = `(SELECT group_concat(v.pos, ',' ORDER BY v.rowid) || ';[' || group_concat(v.event, ',' ORDER BY v.rowid) || ']'
		FROM idem_audit_events v WHERE v.org = r.org AND v.execution_id = r.id)`

// decodeAppended reads the events appended to execution id, as
// appendedEventsSQL gives them.
func decodeAppended(id, text string) ([]appended.Event, error) {
	positions, events, ok := strings.Cut(text, ";")
	if !ok {
		return nil, fmt.Errorf("execution %q: appended events %.40q", id, text)
	}
	evs, err := decodeEvents(id, events)
	if err != nil {
		return nil, err
	}
	pos := strings.Split(positions, ",")
	if len(pos) != len(evs) {
		return nil, fmt.Errorf("execution %q: %d appended events, %d positions", id, len(evs), len(pos))
	}
	out := make([]appended.Event, len(evs))
	for i, ev := range evs {
		p, err := strconv.Atoi(pos[i])
		if err != nil {
			return nil, fmt.Errorf("execution %q: appended event position %q", id, pos[i])
		}
		out[i] = appended.Event{Pos: p, Event: ev}
	}
	return out, nil
}

// newExecution is the execution p starts now, with its first events
// (execution.started, and approval.consumed when it consumes one), not yet
// linked to an earlier one.
func newExecution(p idem.StartParams, key string, now time.Time) idem.Execution {
	x := idem.Execution{
		ID:          p.ExecutionID,
		Org:         p.Scope.Org,
		Operation:   p.Operation,
		Principal:   p.Scope.Principal,
		Fingerprint: p.Fingerprint,
		Key:         key,
		Attempts:    1,
		Outcome:     idem.OutcomeRunning,
		StartedAt:   now,
		Events:      []idem.AuditEvent{{ExecutionID: p.ExecutionID, Type: idem.EventStarted, At: now, Attempt: 1}},
	}
	if p.ApprovalID != "" {
		x.Events = append(x.Events, idem.AuditEvent{ExecutionID: p.ExecutionID, Type: idem.EventApprovalConsumed, At: now,
			Data: map[string]string{"approvalId": p.ApprovalID}})
	}
	return x
}

// returnApproval gives back the approval that execution consumed
// (FinishParams.ReturnApproval): approved and unconsumed again. An
// approval not consumed by that execution is left as it is.
func returnApproval(ctx context.Context, tx txn, org, approvalID, execution string) error {
	if approvalID == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE idem_approvals SET status = 'approved', consumed_at = NULL, execution_id = NULL
		WHERE org = ? AND id = ? AND execution_id = ? AND status = 'consumed'`, org, approvalID, execution)
	return err
}

// consumeApproval consumes p.ApprovalID, if set, for p's execution:
// ErrApprovalNotConsumable unless it is approved, unexpired and bound to
// p's intent.
func consumeApproval(ctx context.Context, tx txn, p idem.StartParams, now time.Time) error {
	if p.ApprovalID == "" {
		return nil
	}
	res, err := tx.ExecContext(ctx, `UPDATE idem_approvals SET status = 'consumed', consumed_at = ?, execution_id = ?
		WHERE org = ? AND id = ? AND requested_by = ? AND operation = ? AND fingerprint = ?
		AND status = 'approved' AND expires_at > ?`,
		micros(now), p.ExecutionID, p.Scope.Org, p.ApprovalID, p.Scope.Principal, p.Operation, p.Fingerprint, micros(now))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return idem.ErrApprovalNotConsumable
	}
	return nil
}

// startExecution creates an unkeyed execution with its first events,
// consuming p.ApprovalID if set: one row, one INSERT.
func startExecution(ctx context.Context, tx txn, now time.Time, p idem.StartParams) (idem.Execution, error) {
	x := newExecution(p, "", now)
	if err := consumeApproval(ctx, tx, p, now); err != nil {
		return idem.Execution{}, err
	}
	events, err := encodeEvents(x.Events, now)
	if err != nil {
		return idem.Execution{}, err
	}
	var previous sql.NullString
	if err := tx.QueryRowContext(ctx, `INSERT INTO idem_records
		(org, id, principal, operation, fingerprint, held, attempts, outcome, reinvocation_of, started_at, events)
		VALUES (?1, ?2, ?3, ?4, ?5, 0, 1, 'running', `+previousExecutionSQL+`, ?6, ?7)
		RETURNING reinvocation_of`,
		x.Org, x.ID, x.Principal, x.Operation, x.Fingerprint, micros(now), events).Scan(&previous); err != nil {
		return idem.Execution{}, err
	}
	x.ReinvocationOf = stringPtr(previous)
	return x, nil
}

// previousExecutionSQL is the subquery of the most recent execution of the
// intent ?1 org, ?3 principal, ?4 operation, ?5 fingerprint (on the index
// idem_records_intent): what a new execution of it is a reinvocation of
// (SPEC §13).
const previousExecutionSQL = `(SELECT id FROM idem_records
			WHERE org = ?1 AND principal = ?3 AND operation = ?4 AND fingerprint = ?5
			ORDER BY started_at DESC, rowid DESC LIMIT 1)`

// finishExecution records p's outcome and appends its events, all to the
// execution p names: one UPDATE.
func finishExecution(ctx context.Context, tx txn, now time.Time, p idem.FinishParams) error {
	events, err := encodeEvents(p.Events, now)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `UPDATE idem_records SET outcome = ?3, code = ?4, attempts = ?5, finished_at = ?6, `+appendEventsSQL("?7")+`
		WHERE org = ?1 AND id = ?2`, p.Org, p.ExecutionID, p.Outcome, nullString(string(p.Code)), p.Attempts, micros(now), events)
	if err := expectRow(res, err, p.ExecutionID); err != nil {
		return err
	}
	return returnApproval(ctx, tx, p.Org, p.ReturnApproval, p.ExecutionID)
}

// expectRow passes the result of a statement that must have changed the
// row of execution id: NOT_FOUND when it changed none.
func expectRow(res sql.Result, err error, id string) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return executionNotFound(id)
	}
	return nil
}

func executionNotFound(id string) error {
	return idem.Errorf(idem.CodeNotFound, "execution %q not found", id)
}

// ListExecutions implements idem.Store.
func (s *Store) ListExecutions(ctx context.Context, p idem.ListExecutionsParams) ([]idem.Execution, error) {
	out := []idem.Execution{}
	err := s.read(ctx, "list executions", func(tx txn, _ time.Time) error {
		where, args := []string{"org = ?"}, []any{p.Org}
		for _, f := range []struct{ column, value string }{
			{"principal", p.Principal}, {"operation", p.Operation}, {"outcome", string(p.Outcome)},
		} {
			if f.value != "" {
				where = append(where, f.column+" = ?")
				args = append(args, f.value)
			}
		}
		limit := p.Limit
		if limit <= 0 {
			limit = 100
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+executionColumns+` FROM idem_records
			WHERE `+strings.Join(where, " AND ")+` ORDER BY started_at DESC, rowid DESC LIMIT ?`, append(args, limit)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			x, err := scanExecution(rows)
			if err != nil {
				return err
			}
			out = append(out, x)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// executionColumns are the columns of a row of idem_records that make its
// execution, without events, in scanExecution's order.
const executionColumns = `org, id, principal, operation, fingerprint, key, attempts, outcome,
	code, reinvocation_of, started_at, finished_at`

// scanExecution reads one row of executionColumns (without events), and
// into more any columns that follow them.
func scanExecution(row interface{ Scan(...any) error }, more ...any) (idem.Execution, error) {
	var (
		x                         idem.Execution
		key, code, reinvocationOf sql.NullString
		started                   int64
		finished                  sql.NullInt64
	)
	if err := row.Scan(append([]any{&x.Org, &x.ID, &x.Principal, &x.Operation, &x.Fingerprint, &key, &x.Attempts, &x.Outcome,
		&code, &reinvocationOf, &started, &finished}, more...)...); err != nil {
		return idem.Execution{}, err
	}
	x.Key = key.String
	if code.Valid {
		c := idem.Code(code.String)
		x.Code = &c
	}
	x.ReinvocationOf = stringPtr(reinvocationOf)
	x.StartedAt = fromMicros(started)
	x.FinishedAt = timePtr(finished)
	return x, nil
}

// RecordExecutions implements idem.Store: one INSERT per execution, in one
// write transaction. Each links to the most recent earlier execution of
// its intent, which the subquery finds among the rows inserted before it.
func (s *Store) RecordExecutions(ctx context.Context, p idem.RecordExecutionsParams) error {
	if len(p.Executions) == 0 {
		return nil
	}
	return s.write(ctx, "record executions", func(ctx context.Context, tx txn, now time.Time) error {
		for _, e := range p.Executions {
			st, fin := e.Start, e.Finish
			startedAt, finishedAt := e.StartedAt, e.FinishedAt
			if startedAt.IsZero() {
				startedAt = now
			}
			if finishedAt.IsZero() {
				finishedAt = now
			}
			events, err := encodeEvents(append(newExecution(st, "", startedAt).Events, fin.Events...), now)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO idem_records
				(org, id, principal, operation, fingerprint, held, attempts, outcome, code, reinvocation_of, started_at, finished_at, events)
				VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7, ?8, `+previousExecutionSQL+`, ?9, ?10, ?11)`,
				st.Scope.Org, st.ExecutionID, st.Scope.Principal, st.Operation, st.Fingerprint, fin.Attempts, fin.Outcome,
				nullString(string(fin.Code)), micros(startedAt), micros(finishedAt), events); err != nil {
				return err
			}
		}
		return nil
	})
}
