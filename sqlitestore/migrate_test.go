package sqlitestore

import (
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/migrate"
)

// migrateTo applies the embedded migrations up to version to the database
// at path, as Open did when version was the last one.
func migrateTo(t *testing.T, path string, version int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version > version {
			break
		}
		if _, err := db.Exec(m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
		if _, err := db.Exec(`INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
}

// A store migrated from the three tables of migrations 001–004 to the one
// of 005 answers for its existing data as before: records (completed, in
// flight, indeterminate, forgotten, one whose execution was gone),
// executions (keyed and not) with their events in order, lists, and
// same-key reservations.
func TestMigrateToRecordsKeepsExistingRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	migrateTo(t, path, 4)

	// The rows, written as the store of migration 004 wrote them.
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	us := func(d time.Duration) int64 { return at(d).UnixMicro() }
	const fp, fp2 = "fp-refund-1", "fp-show-1"
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	type row []any
	insert := func(q string, rows ...row) {
		t.Helper()
		for _, r := range rows {
			if _, err := db.Exec(q, r...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	insert(`INSERT INTO idem_executions (org, id, principal, operation, fingerprint, key, attempts, outcome, code, reinvocation_of, started_at, finished_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		row{"acme", "exe_gone", "agent-1", "order.refund", fp, "key-gone", 1, "succeeded", nil, nil, us(-25 * time.Hour), us(-25*time.Hour + time.Second)},
		row{"acme", "exe_done", "agent-1", "order.refund", fp, "key-done", 1, "succeeded", nil, "exe_gone", us(0), us(time.Second)},
		row{"acme", "exe_running", "agent-2", "order.refund", fp, "key-running", 1, "running", nil, nil, us(10 * time.Second), nil},
		row{"acme", "exe_broken", "agent-1", "order.show", fp2, "key-broken", 2, "failed", "EXECUTION_FAILED", nil, us(20 * time.Second), us(21 * time.Second)},
		row{"acme", "exe_plain", "agent-1", "order.refund", fp, nil, 1, "succeeded", nil, "exe_done", us(30 * time.Second), us(30*time.Second + 5*time.Microsecond)},
		row{"globex", "exe_globex", "agent-1", "order.refund", fp, nil, 1, "running", nil, nil, us(30 * time.Second), nil},
	)
	insert(`INSERT INTO idem_attempts (org, principal, key, operation, fingerprint, state, execution_id, fencing_token, lease_expires_at,
			status, headers, body, sealed_key_id, created_at, completed_at, expires_at, secret_expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		row{"acme", "agent-1", "key-done", "order.refund", fp, "completed", "exe_done", 2, us(35 * time.Second),
			201, `{"Content-Type":["application/json"]}`, []byte(`{"data":{"id":1}}`), nil, us(0), us(time.Second), us(24 * time.Hour), nil},
		row{"acme", "agent-2", "key-running", "order.refund", fp, "in_flight", "exe_running", 3, us(time.Hour),
			nil, nil, nil, nil, us(10 * time.Second), nil, us(24 * time.Hour), nil},
		row{"acme", "agent-1", "key-broken", "order.show", fp2, "indeterminate", "exe_broken", 4, us(55 * time.Second),
			502, `{}`, []byte(`{"error":{}}`), nil, us(20 * time.Second), us(21 * time.Second), us(24 * time.Hour), nil},
		row{"acme", "agent-1", "key-orphan", "order.show", fp2, "completed", "exe_orphan", 5, us(75 * time.Second),
			200, `{}`, []byte(`{}`), nil, us(40 * time.Second), us(41 * time.Second), us(24 * time.Hour), nil},
	)
	insert(`INSERT INTO idem_audit_events (org, execution_id, type, at, attempt, code, previous_error_code, attempts, duration_ms, data)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		row{"acme", "exe_done", "execution.started", us(0), 1, nil, nil, nil, nil, nil},
		row{"acme", "exe_broken", "execution.started", us(20 * time.Second), 1, nil, nil, nil, nil, nil},
		row{"acme", "exe_done", "execution.succeeded", us(time.Second), nil, nil, nil, 1, 1000, `{"status":"201"}`},
		row{"acme", "exe_running", "execution.started", us(10 * time.Second), 1, nil, nil, nil, nil, nil},
		row{"acme", "exe_running", "approval.consumed", us(10 * time.Second), nil, nil, nil, nil, nil, `{"approvalId":"apr_1"}`},
		row{"acme", "exe_broken", "execution.retried", us(20*time.Second + 7*time.Microsecond), 2, nil, "TIMEOUT", nil, nil, nil},
		row{"acme", "exe_broken", "execution.failed", us(21 * time.Second), nil, "EXECUTION_FAILED", nil, 2, 1000, `{"cause":"EXECUTION_FAILED: \"x\" ünïcode"}`},
		row{"acme", "exe_done", "execution.replayed", us(2*time.Second + time.Microsecond), nil, nil, nil, nil, nil, nil},
		row{"acme", "exe_nowhere", "execution.replayed", us(0), nil, nil, nil, nil, nil, nil}, // no execution: dropped
	)
	insert(`UPDATE idem_counters SET value = 5 WHERE name = 'fencing_token'`, row{})
	db.Close()

	clock := fakeclock.New(at(time.Minute))
	s, err := Open(t.Context(), path, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	var tables []string
	rows, err := s.r.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'idem_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	// idem_audit_events is migration 008's (appended events), empty here.
	if want := []string{"idem_approvals", "idem_audit_events", "idem_counters", "idem_records", "idem_schema_migrations"}; !slices.Equal(tables, want) {
		t.Fatalf("tables after migration: %v, want %v", tables, want)
	}

	agent1, agent2 := idem.Scope{Org: "acme", Principal: "agent-1"}, idem.Scope{Org: "acme", Principal: "agent-2"}
	wantDone := idem.Attempt{Scope: agent1, Key: "key-done", Operation: "order.refund", Fingerprint: fp, State: idem.AttemptCompleted,
		ExecutionID: "exe_done", FencingToken: 2, LeaseExpiresAt: at(35 * time.Second), Status: 201,
		Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"data":{"id":1}}`),
		Attempts: 1, CreatedAt: at(0), CompletedAt: at(time.Second), ExpiresAt: at(24 * time.Hour), ObservedAt: clock.Now()}
	if got, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: agent1, Key: "key-done"}); err != nil || !reflect.DeepEqual(got, wantDone) {
		t.Fatalf("completed record = %+v, %v; want %+v", got, err, wantDone)
	}
	for _, c := range []struct {
		scope  idem.Scope
		key    string
		state  idem.AttemptState
		status int
		exe    string
	}{
		{agent2, "key-running", idem.AttemptInFlight, 0, "exe_running"},
		{agent1, "key-broken", idem.AttemptIndeterminate, 502, "exe_broken"},
		{agent1, "key-orphan", idem.AttemptCompleted, 200, "exe_orphan"},
	} {
		got, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: c.scope, Key: c.key})
		if err != nil || got.State != c.state || got.Status != c.status || got.ExecutionID != c.exe {
			t.Errorf("record %s = %+v, %v; want %s, status %d, execution %s", c.key, got, err, c.state, c.status, c.exe)
		}
	}
	if _, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: agent1, Key: "key-gone"}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("forgotten record: err = %v, want NOT_FOUND", err)
	}
	if left, err := s.LeaseLeft(ctx, idem.Fence{Scope: agent2, Key: "key-running", FencingToken: 3}); err != nil || left != time.Hour-time.Minute {
		t.Errorf("LeaseLeft of the record in flight = %v, %v; want %v", left, err, time.Hour-time.Minute)
	}

	// Executions, with their events in order and their times exact.
	ptr := func(s string) *string { return &s }
	code := func(c idem.Code) *idem.Code { return &c }
	tm := func(d time.Duration) *time.Time { t := at(d); return &t }
	ev := func(id, typ string, d time.Duration, attempt int) idem.AuditEvent {
		return idem.AuditEvent{ExecutionID: id, Type: typ, At: at(d), Attempt: attempt}
	}
	failed := ev("exe_broken", idem.EventFailed, 21*time.Second, 0)
	failed.Code, failed.Attempts, failed.DurationMs, failed.Data = idem.CodeExecutionFailed, 2, 1000, map[string]string{"cause": `EXECUTION_FAILED: "x" ünïcode`}
	retried := ev("exe_broken", idem.EventRetried, 20*time.Second+7*time.Microsecond, 2)
	retried.PreviousErrorCode = idem.CodeTimeout
	succeeded := ev("exe_done", idem.EventSucceeded, time.Second, 0)
	succeeded.Attempts, succeeded.DurationMs, succeeded.Data = 1, 1000, map[string]string{"status": "201"}
	consumed := ev("exe_running", idem.EventApprovalConsumed, 10*time.Second, 0)
	consumed.Data = map[string]string{"approvalId": "apr_1"}
	for _, want := range []idem.Execution{
		{ID: "exe_done", Org: "acme", Operation: "order.refund", Principal: "agent-1", Fingerprint: fp, Key: "key-done", Attempts: 1,
			Outcome: idem.OutcomeSucceeded, ReinvocationOf: ptr("exe_gone"), StartedAt: at(0), FinishedAt: tm(time.Second),
			Events: []idem.AuditEvent{ev("exe_done", idem.EventStarted, 0, 1), succeeded, ev("exe_done", idem.EventReplayed, 2*time.Second+time.Microsecond, 0)}},
		{ID: "exe_broken", Org: "acme", Operation: "order.show", Principal: "agent-1", Fingerprint: fp2, Key: "key-broken", Attempts: 2,
			Outcome: idem.OutcomeFailed, Code: code(idem.CodeExecutionFailed), StartedAt: at(20 * time.Second), FinishedAt: tm(21 * time.Second),
			Events: []idem.AuditEvent{ev("exe_broken", idem.EventStarted, 20*time.Second, 1), retried, failed}},
		{ID: "exe_plain", Org: "acme", Operation: "order.refund", Principal: "agent-1", Fingerprint: fp, Attempts: 1,
			Outcome: idem.OutcomeSucceeded, ReinvocationOf: ptr("exe_done"), StartedAt: at(30 * time.Second), FinishedAt: tm(30*time.Second + 5*time.Microsecond),
			Events: []idem.AuditEvent{}},
		{ID: "exe_orphan", Org: "acme", Operation: "order.show", Principal: "agent-1", Fingerprint: fp2, Key: "key-orphan", Attempts: 1,
			Outcome: idem.OutcomeSucceeded, StartedAt: at(40 * time.Second), FinishedAt: tm(41 * time.Second), Events: []idem.AuditEvent{}},
		{ID: "exe_gone", Org: "acme", Operation: "order.refund", Principal: "agent-1", Fingerprint: fp, Key: "key-gone", Attempts: 1,
			Outcome: idem.OutcomeSucceeded, StartedAt: at(-25 * time.Hour), FinishedAt: tm(-25*time.Hour + time.Second), Events: []idem.AuditEvent{}},
	} {
		got, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: want.Org, ID: want.ID})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("execution %s =\n %+v, %v\nwant\n %+v", want.ID, got, err, want)
		}
	}
	if _, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: "acme", ID: "exe_nowhere"}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("events without an execution: err = %v, want NOT_FOUND", err)
	}
	list, err := s.ListExecutions(ctx, idem.ListExecutionsParams{Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range list {
		ids = append(ids, x.ID)
	}
	if want := []string{"exe_orphan", "exe_plain", "exe_broken", "exe_running", "exe_done", "exe_gone"}; !slices.Equal(ids, want) {
		t.Errorf("ListExecutions = %v, want %v", ids, want)
	}

	// Same-key reservations: existing records answer, a forgotten key
	// reserves afresh with a token past the counter.
	reserve := func(scope idem.Scope, key, fingerprint string) idem.ReserveResult {
		t.Helper()
		res, err := s.Reserve(ctx, idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: "exe_new_" + key, Scope: scope,
			Operation: "order.refund", Fingerprint: fingerprint}, Key: key, Lease: 35 * time.Second, Retention: 24 * time.Hour})
		if err != nil {
			t.Fatalf("Reserve(%s): %v", key, err)
		}
		return res
	}
	if res := reserve(agent1, "key-done", fp); res.Reserved || !reflect.DeepEqual(res.Attempt, wantDone) {
		t.Errorf("Reserve of the completed key = %+v, want its record", res)
	}
	for _, c := range []struct {
		scope idem.Scope
		key   string
		exe   string
	}{{agent2, "key-running", "exe_running"}, {agent1, "key-broken", "exe_broken"}, {agent1, "key-orphan", "exe_orphan"}} {
		if res := reserve(c.scope, c.key, fp); res.Reserved || res.Attempt.ExecutionID != c.exe {
			t.Errorf("Reserve of %s = %+v, want its record", c.key, res)
		}
	}
	fresh := reserve(agent1, "key-gone", fp)
	if !fresh.Reserved || fresh.Attempt.FencingToken != 6 || fresh.Execution.ReinvocationOf == nil || *fresh.Execution.ReinvocationOf != "exe_plain" {
		t.Errorf("Reserve of the forgotten key = %+v, want a new record with token 6, a reinvocation of exe_plain", fresh)
	}

	// The record in flight completes under its token.
	p := idem.CompleteParams{Scope: agent2, Key: "key-running", FencingToken: 3, Status: 200, Body: []byte(`{}`),
		Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}
	if a, err := s.Complete(ctx, p); err != nil || a.State != idem.AttemptCompleted {
		t.Fatalf("Complete of the migrated record in flight = %+v, %v", a, err)
	}
	x, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: "acme", ID: "exe_running"})
	if err != nil {
		t.Fatal(err)
	}
	done := idem.AuditEvent{ExecutionID: "exe_running", Type: idem.EventSucceeded, At: at(time.Minute), Attempts: 1}
	if want := []idem.AuditEvent{ev("exe_running", idem.EventStarted, 10*time.Second, 1), consumed, done}; !reflect.DeepEqual(x.Events, want) || x.Outcome != idem.OutcomeSucceeded {
		t.Errorf("completed execution = %+v, want events %+v", x, want)
	}
	// Events append to a migrated execution that had none.
	if err := s.AppendEvents(ctx, idem.AppendEventsParams{Org: "acme", Events: []idem.AuditEvent{{ExecutionID: "exe_plain", Type: idem.EventReplayed}}}); err != nil {
		t.Fatal(err)
	}
	if x, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: "acme", ID: "exe_plain"}); err != nil || len(x.Events) != 1 || x.Events[0].Type != idem.EventReplayed {
		t.Errorf("execution appended to = %+v, %v; want its one event", x, err)
	}
}

// Migration 006 adds each record's fingerprint version: a record written
// at migration 005 (as the release before wrote it) reads with version 0
// and keeps everything else, and a reservation made now stores the
// version it is given (issue 33 item 5).
func TestFingerprintVersionMigrationKeepsExistingRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	migrateTo(t, path, 5)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	// What sqlitestore at migration 005 wrote for a completed keyed call.
	if _, err := db.Exec(`INSERT INTO idem_records (org, id, principal, operation, fingerprint, key, held, state, fencing_token,
			lease_expires_at, status, headers, body, completed_at, expires_at, attempts, outcome, started_at, finished_at, events)
		VALUES ('acme', 'exe_before', 'agent', 'op', 'fp-v1', 'k-before', 1, 'completed', 21, ?1, 201,
			'{"Content-Type":["application/json"]}', CAST('{"id":"w0"}' AS BLOB), ?2, ?3, 1, 'succeeded', ?2, ?2, '[]')`,
		now.Add(time.Minute).UnixMicro(), now.UnixMicro(), now.Add(24*time.Hour).UnixMicro()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(t.Context(), path, idem.StoreConfig{Clock: fakeclock.New(now.Add(time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scope := idem.Scope{Org: "acme", Principal: "agent"}
	a, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k-before"})
	if err != nil || a.FingerprintVersion != 0 || a.Fingerprint != "fp-v1" || a.State != idem.AttemptCompleted || a.Status != 201 || string(a.Body) != `{"id":"w0"}` {
		t.Fatalf("the record made before the migration = %+v, %v; want it as it was, version 0", a, err)
	}
	res, err := s.Reserve(t.Context(), idem.ReserveParams{
		StartParams: idem.StartParams{ExecutionID: "exe_after", Scope: scope, Operation: "op", Fingerprint: "fp-v2", FingerprintVersion: 2},
		Key:         "k-after", Lease: time.Minute, Retention: time.Hour,
	})
	if err != nil || !res.Reserved || res.Attempt.FingerprintVersion != 2 {
		t.Fatalf("a reservation after the migration = %+v, %v", res, err)
	}
	if a, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k-after"}); err != nil || a.FingerprintVersion != 2 {
		t.Fatalf("the record reserved after the migration = %+v, %v; want version 2", a, err)
	}
}

// Migration 007 keeps the approvals made before it: they carry no rule and
// are decided by the approver role.
func TestMigrateApprovalRuleKeepsApprovals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	migrateTo(t, path, 6)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO idem_approvals (org, id, requested_by, operation, fingerprint, input, reason, status, created_at, expires_at)
		VALUES ('acme', 'apr_old', 'agent-1', 'order.refund', 'fp', '{"amount":1}', 'old reason', 'pending', ?, ?)`,
		t0.UnixMicro(), t0.Add(time.Hour).UnixMicro()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(t.Context(), path, idem.StoreConfig{Clock: fakeclock.New(t0)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.GetApproval(t.Context(), idem.GetApprovalParams{Org: "acme", ID: "apr_old"})
	if err != nil || a.Reason != "old reason" || a.Rule != "" || a.DecidedByRole() != idem.RoleApprover {
		t.Fatalf("old approval %+v, %v", a, err)
	}
	res, err := s.RequestApproval(t.Context(), idem.RequestApprovalParams{ID: "apr_new", Org: "acme", RequestedBy: "agent-1", Operation: "order.refund",
		Fingerprint: "fp2", Reason: "r", Expiry: time.Hour, Rule: "big-refunds", ApproverRole: "finance"})
	if err != nil || res.Approval.Rule != "big-refunds" || res.Approval.ApproverRole != "finance" {
		t.Fatalf("new approval %+v, %v", res.Approval, err)
	}
}
