package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

// recordEventsLength is the length of execution id's events array as
// stored in its row.
func recordEventsLength(t *testing.T, s *Store, id string) int {
	t.Helper()
	var n int
	if err := s.r.QueryRowContext(t.Context(), `SELECT length(events) FROM idem_records WHERE org = 'acme' AND id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Events appended one at a time to an execution (a key replayed again and
// again) are rows of their own: the record's row is not written, so what
// an append writes does not grow with the appends before it. GetExecution
// reads them back in order, each after the record's events written before
// it.
func TestAppendedEventsLeaveTheRecordAlone(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC))
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, scope := t.Context(), idem.Scope{Org: "acme", Principal: "agent"}
	if _, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: "exe_1", Scope: scope, Operation: "op", Fingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	replay := func(n int) {
		t.Helper()
		clock.Advance(time.Second)
		if err := s.AppendEvents(ctx, idem.AppendEventsParams{Org: scope.Org, Events: []idem.AuditEvent{
			{ExecutionID: "exe_1", Type: idem.EventReplayed, Data: map[string]string{"n": fmt.Sprint(n)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	replay(0) // while running: before the finish's events
	if err := s.FinishExecution(ctx, idem.FinishParams{Org: scope.Org, ExecutionID: "exe_1", Outcome: idem.OutcomeSucceeded, Attempts: 1,
		Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	const m = 200
	before := recordEventsLength(t, s, "exe_1")
	for i := 1; i <= m; i++ {
		replay(i)
		if n := recordEventsLength(t, s, "exe_1"); n != before {
			t.Fatalf("append %d: the record's events are %d bytes, %d before the appends; want them unchanged", i, n, before)
		}
	}
	x, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: "exe_1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Events) != m+3 {
		t.Fatalf("%d events, want %d", len(x.Events), m+3)
	}
	want := []string{idem.EventStarted, idem.EventReplayed, idem.EventSucceeded}
	for i, ev := range x.Events {
		if i < len(want) && ev.Type != want[i] || i >= len(want) && (ev.Type != idem.EventReplayed || ev.Data["n"] != fmt.Sprint(i-2)) {
			t.Fatalf("event %d = %+v; want %v then replays in order", i, ev, want)
		}
		if ev.ExecutionID != "exe_1" || i > 0 && ev.At.Before(x.Events[i-1].At) {
			t.Fatalf("event %d = %+v after %+v", i, ev, x.Events[i-1])
		}
	}

	// An event naming a missing execution fails the call; nothing of it
	// is written.
	err = s.AppendEvents(ctx, idem.AppendEventsParams{Org: scope.Org, Events: []idem.AuditEvent{
		{ExecutionID: "exe_1", Type: idem.EventReplayed}, {ExecutionID: "exe_missing", Type: idem.EventReplayed}}})
	if !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("append to a missing execution: %v, want NOT_FOUND", err)
	}
	var rows int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM idem_audit_events`).Scan(&rows); err != nil || rows != m+1 {
		t.Fatalf("%d appended rows (%v), want %d", rows, err, m+1)
	}
}

// Migration 008 keeps the events an execution's array got appended
// before it, and later appends follow them.
func TestMigrateAppendedEventsKeepsArrays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	migrateTo(t, path, 7)
	t0 := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	// As the store of migration 007 left a completed unkeyed execution
	// replayed twice: the replays appended to its array.
	if _, err := db.Exec(`INSERT INTO idem_records (org, id, principal, operation, fingerprint, held, attempts, outcome, started_at, finished_at, events)
		VALUES ('acme', 'exe_old', 'agent', 'op', 'fp', 0, 1, 'succeeded', ?1, ?1, ?2)`, t0.UnixMicro(),
		`[{"type":"execution.started","at":"2026-12-05T03:00:00Z","attempt":1},`+
			`{"type":"execution.succeeded","at":"2026-12-05T03:00:00.000001Z","attempts":1},`+
			`{"type":"execution.replayed","at":"2026-12-05T03:00:01Z"},`+
			`{"type":"execution.replayed","at":"2026-12-05T03:00:02Z","data":{"n":"2"}}]`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(t.Context(), path, idem.StoreConfig{Clock: fakeclock.New(t0.Add(time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AppendEvents(t.Context(), idem.AppendEventsParams{Org: "acme", Events: []idem.AuditEvent{
		{ExecutionID: "exe_old", Type: idem.EventReplayed, Data: map[string]string{"n": "3"}}}}); err != nil {
		t.Fatal(err)
	}
	x, err := s.GetExecution(t.Context(), idem.GetExecutionParams{Org: "acme", ID: "exe_old"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range x.Events {
		got = append(got, fmt.Sprint(ev.Type, ev.Data["n"], " ", ev.At.Format(time.RFC3339Nano)))
	}
	want := []string{
		"execution.started 2026-12-05T03:00:00Z", "execution.succeeded 2026-12-05T03:00:00.000001Z",
		"execution.replayed 2026-12-05T03:00:01Z", "execution.replayed2 2026-12-05T03:00:02Z",
		"execution.replayed3 2026-12-05T03:01:00Z",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events after the migration:\n%q\nwant\n%q", got, want)
	}
}

// The sweeper removes an execution past the audit retention with the
// events appended to it, at most a batch of those per round: one with
// more than a batch goes over several rounds, and no appended row
// outlives its execution.
func TestAuditRetentionTakesAppendedEvents(t *testing.T) {
	const window = 7 * 24 * time.Hour
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, scope := t.Context(), idem.Scope{Org: "acme", Principal: "agent"}
	appends := []int{25, 1, 0, 3} // the last one within the window
	for i, n := range appends {
		if i == len(appends)-1 {
			clock.Advance(window)
		}
		id := fmt.Sprint("exe_", i)
		if _, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: id, Scope: scope, Operation: "op", Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishExecution(ctx, idem.FinishParams{Org: scope.Org, ExecutionID: id, Outcome: idem.OutcomeSucceeded, Attempts: 1,
			Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := s.AppendEvents(ctx, idem.AppendEventsParams{Org: scope.Org, Events: []idem.AuditEvent{{ExecutionID: id, Type: idem.EventReplayed}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	clock.Advance(time.Minute)
	var executions, events, rounds int
	for {
		rounds++
		r, err := s.Sweep(ctx, idem.SweepParams{BatchSize: 10, AuditRetention: window})
		if err != nil {
			t.Fatal(err)
		}
		executions, events = executions+r.ExecutionsRemoved, events+r.EventsRemoved
		if r.Done(10) || rounds > 10 {
			break
		}
	}
	// 25 + 1 appended rows and 2 events in each of 3 arrays.
	if executions != 3 || events != 26+6 || rounds > 5 {
		t.Fatalf("%d rounds removed %d executions and %d events; want 3 and 32", rounds, executions, events)
	}
	var left int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM idem_audit_events WHERE execution_id <> 'exe_3'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d appended rows of removed executions left (%v)", left, err)
	}
	x, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: "exe_3"})
	if err != nil || len(x.Events) != 5 {
		t.Fatalf("the execution within the window = %+v, %v; want its 5 events", x, err)
	}
}
