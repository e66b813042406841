package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/idem-run/idem"
)

// StartExecution implements idem.Store.
func (s *Store) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	var out idem.Execution
	err := s.write(ctx, "start execution", func(ctx context.Context, tx txn, now time.Time) (err error) {
		out, err = startExecution(ctx, tx, now, p, "")
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

// AppendEvents implements idem.Store.
func (s *Store) AppendEvents(ctx context.Context, p idem.AppendEventsParams) error {
	return s.write(ctx, "append events", func(ctx context.Context, tx txn, now time.Time) error {
		known := map[string]bool{}
		for _, ev := range p.Events {
			if !known[ev.ExecutionID] {
				var exists bool
				if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM idem_executions WHERE org = ? AND id = ?)`,
					p.Org, ev.ExecutionID).Scan(&exists); err != nil {
					return err
				}
				if !exists {
					return executionNotFound(ev.ExecutionID)
				}
				known[ev.ExecutionID] = true
			}
		}
		return insertEvents(ctx, tx, now, p.Org, p.Events)
	})
}

// GetExecution implements idem.Store.
func (s *Store) GetExecution(ctx context.Context, p idem.GetExecutionParams) (idem.Execution, error) {
	var x idem.Execution
	err := s.read(ctx, "get execution", func(tx txn, _ time.Time) error {
		var err error
		x, err = scanExecution(tx.QueryRowContext(ctx, `SELECT `+executionColumns+` FROM idem_executions
			WHERE org = ? AND id = ?`, p.Org, p.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return executionNotFound(p.ID)
		}
		if err != nil {
			return err
		}
		x.Events, err = listEvents(ctx, tx, p.Org, p.ID)
		return err
	})
	if err != nil {
		return idem.Execution{}, err
	}
	return x, nil
}

// startExecution creates an execution with its execution.started event,
// consuming p.ApprovalID first if set.
func startExecution(ctx context.Context, tx txn, now time.Time, p idem.StartParams, key string) (idem.Execution, error) {
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
		res, err := tx.ExecContext(ctx, `UPDATE idem_approvals SET status = 'consumed', consumed_at = ?, execution_id = ?
			WHERE org = ? AND id = ? AND requested_by = ? AND operation = ? AND fingerprint = ?
			AND status = 'approved' AND expires_at > ?`,
			micros(now), p.ExecutionID, p.Scope.Org, p.ApprovalID, p.Scope.Principal, p.Operation, p.Fingerprint, micros(now))
		if err != nil {
			return idem.Execution{}, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return idem.Execution{}, err
		} else if n == 0 {
			return idem.Execution{}, idem.ErrApprovalNotConsumable
		}
		x.Events = append(x.Events, idem.AuditEvent{ExecutionID: p.ExecutionID, Type: idem.EventApprovalConsumed, At: now,
			Data: map[string]string{"approvalId": p.ApprovalID}})
	}

	// The execution, linked to the most recent earlier one of its intent,
	// and its events: two statements.
	var previous sql.NullString
	if err := tx.QueryRowContext(ctx, `INSERT INTO idem_executions
		(org, id, principal, operation, fingerprint, key, attempts, outcome, reinvocation_of, started_at)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, `+previousExecutionSQL+`, ?9)
		RETURNING reinvocation_of`,
		x.Org, x.ID, x.Principal, x.Operation, x.Fingerprint, nullString(key), x.Attempts, x.Outcome, micros(now)).Scan(&previous); err != nil {
		return idem.Execution{}, err
	}
	x.ReinvocationOf = stringPtr(previous)
	if err := insertEvents(ctx, tx, now, x.Org, x.Events); err != nil {
		return idem.Execution{}, err
	}
	return x, nil
}

// previousExecutionSQL is the subquery of the most recent execution of the
// intent ?1 org, ?3 principal, ?4 operation, ?5 fingerprint: what a new
// execution of it is a reinvocation of (SPEC §13).
const previousExecutionSQL = `(SELECT id FROM idem_executions
			WHERE org = ?1 AND principal = ?3 AND operation = ?4 AND fingerprint = ?5
			ORDER BY started_at DESC, rowid DESC LIMIT 1)`

// finishExecution records p's outcome and appends its events.
func finishExecution(ctx context.Context, tx txn, now time.Time, p idem.FinishParams) error {
	res, err := tx.ExecContext(ctx, `UPDATE idem_executions SET outcome = ?, code = ?, attempts = ?, finished_at = ?
		WHERE org = ? AND id = ?`, p.Outcome, nullString(string(p.Code)), p.Attempts, micros(now), p.Org, p.ExecutionID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return executionNotFound(p.ExecutionID)
	}
	events := make([]idem.AuditEvent, len(p.Events))
	for i, ev := range p.Events {
		ev.ExecutionID = p.ExecutionID
		events[i] = ev
	}
	return insertEvents(ctx, tx, now, p.Org, events)
}

// foldedEvents is how many events one INSERT appends at most.
const foldedEvents = 16

// insertEventsSQL[n] appends n events in one statement.
var insertEventsSQL = func() (qs [foldedEvents + 1]string) {
	for n := 1; n <= foldedEvents; n++ {
		qs[n] = `INSERT INTO idem_audit_events
			(org, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)
			VALUES ` + strings.Repeat(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?), `, n-1) + `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	}
	return qs
}()

// insertEvents appends events to their executions in order, a statement
// per foldedEvents; an event without a time happens now.
func insertEvents(ctx context.Context, tx txn, now time.Time, org string, events []idem.AuditEvent) error {
	for len(events) > 0 {
		chunk := events[:min(len(events), foldedEvents)]
		events = events[len(chunk):]
		args := make([]any, 0, 10*len(chunk))
		for _, ev := range chunk {
			if ev.At.IsZero() {
				ev.At = now
			}
			var data sql.NullString
			if len(ev.Data) > 0 {
				b, err := json.Marshal(ev.Data)
				if err != nil {
					return err
				}
				data = sql.NullString{String: string(b), Valid: true}
			}
			args = append(args, org, ev.ExecutionID, ev.Type, micros(ev.At), nullInt(int64(ev.Attempt)), nullString(string(ev.Code)),
				nullString(string(ev.PreviousErrorCode)), nullInt(int64(ev.Attempts)), nullInt(ev.DurationMs), data)
		}
		if _, err := tx.ExecContext(ctx, insertEventsSQL[len(chunk)], args...); err != nil {
			return err
		}
	}
	return nil
}

func listEvents(ctx context.Context, tx txn, org, executionID string) ([]idem.AuditEvent, error) {
	rows, err := tx.QueryContext(ctx, `SELECT type, at, attempt, code, previous_error_code, attempts, duration_ms, data
		FROM idem_audit_events WHERE org = ? AND execution_id = ? ORDER BY id`, org, executionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := []idem.AuditEvent{}
	for rows.Next() {
		var (
			ev                                idem.AuditEvent
			at                                int64
			attempt, attempts, durationMs     sql.NullInt64
			code, previousErrorCode, dataJSON sql.NullString
		)
		if err := rows.Scan(&ev.Type, &at, &attempt, &code, &previousErrorCode, &attempts, &durationMs, &dataJSON); err != nil {
			return nil, err
		}
		ev.ExecutionID = executionID
		ev.At = fromMicros(at)
		ev.Attempt = int(attempt.Int64)
		ev.Code = idem.Code(code.String)
		ev.PreviousErrorCode = idem.Code(previousErrorCode.String)
		ev.Attempts = int(attempts.Int64)
		ev.DurationMs = durationMs.Int64
		if dataJSON.Valid {
			if err := json.Unmarshal([]byte(dataJSON.String), &ev.Data); err != nil {
				return nil, err
			}
		}
		events = append(events, ev)
	}
	return events, rows.Err()
}

func executionNotFound(id string) error {
	return idem.Errorf(idem.CodeNotFound, "execution %q not found", id)
}

func nullInt(v int64) sql.NullInt64 { return sql.NullInt64{Int64: v, Valid: v != 0} }

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
		rows, err := tx.QueryContext(ctx, `SELECT `+executionColumns+` FROM idem_executions
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

const executionColumns = `org, id, principal, operation, fingerprint, key, attempts, outcome,
	code, reinvocation_of, started_at, finished_at`

// scanExecution reads one row of executionColumns (without events).
func scanExecution(row interface{ Scan(...any) error }) (idem.Execution, error) {
	var (
		x                         idem.Execution
		key, code, reinvocationOf sql.NullString
		started                   int64
		finished                  sql.NullInt64
	)
	if err := row.Scan(&x.Org, &x.ID, &x.Principal, &x.Operation, &x.Fingerprint, &key, &x.Attempts, &x.Outcome,
		&code, &reinvocationOf, &started, &finished); err != nil {
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
