package sqlitestore

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

// statement is one statement the store ran.
type statement struct {
	q    string
	args []any
}

// traced opens a store whose statements are recorded (statementHook).
func traced(t *testing.T) (*Store, func() []statement) {
	var (
		mu  sync.Mutex
		all []statement
	)
	statementHook = func(q string, args []any) {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, statement{q, append([]any(nil), args...)})
	}
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC))
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		statementHook = nil
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		statementHook = nil
	})
	// taken returns the statements since the last call.
	taken := func() []statement {
		mu.Lock()
		defer mu.Unlock()
		out := all
		all = nil
		return out
	}
	return s, taken
}

// savepoint matches the group commit's and Transact's savepoints.
var savepoint = regexp.MustCompile(`^(SAVEPOINT|RELEASE|ROLLBACK TO) `)

// Each phase of an execution is as few statements, and writes as few rows,
// as docs/store.md ("Statements of an execution") says: one row per
// execution, inserted at its start and updated once at its end; a
// transactional first execution writes its one row and the handler's.
func TestPhaseStatements(t *testing.T) {
	s, taken := traced(t)
	ctx := t.Context()
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	changes := func() int64 {
		var n int64
		if err := s.w.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := s.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE app_things (id TEXT PRIMARY KEY) STRICT`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	reserve := func(key string) idem.ReserveParams {
		return idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "op", Fingerprint: "fp"},
			Key: key, Lease: time.Minute, Retention: 24 * time.Hour}
	}
	finish := idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}
	var fence int64
	approval := ""
	for _, c := range []struct {
		phase      string
		run        func() error
		statements int   // of idem's own, savepoints apart
		rows       int64 // changed, triggers' and the handler's included
	}{
		{"Reserve, fresh key", func() error {
			res, err := s.Reserve(ctx, reserve("k1"))
			fence = res.Attempt.FencingToken
			return err
		}, 1, 2}, // the record and the fencing counter
		{"Complete", func() error {
			_, err := s.Complete(ctx, idem.CompleteParams{Scope: scope, Key: "k1", FencingToken: fence, Status: 201, Body: []byte(`{}`), Finish: finish})
			return err
		}, 1, 1},
		{"Reserve, existing record", func() error { _, err := s.Reserve(ctx, reserve("k1")); return err }, 2, 0},
		{"Reserve, with an approval", func() error {
			r, err := s.RequestApproval(ctx, idem.RequestApprovalParams{ID: "apr_1", Org: scope.Org, RequestedBy: scope.Principal, Operation: "op", Fingerprint: "fp", Reason: "r"})
			if err == nil {
				_, err = s.DecideApproval(ctx, idem.DecideApprovalParams{Org: scope.Org, ID: r.Approval.ID, Decision: idem.Decision{Approve: true, By: "carol"}})
			}
			approval = r.Approval.ID
			return err
		}, -1, -1},
		{"", func() error {
			p := reserve("k2")
			p.ApprovalID = approval
			res, err := s.Reserve(ctx, p)
			fence = res.Attempt.FencingToken
			return err
		}, 2, 3}, // the record, the counter, the approval
		{"Release", func() error {
			return s.Release(ctx, idem.ReleaseParams{Fence: idem.Fence{Scope: scope, Key: "k2", FencingToken: fence}, Finish: finish})
		}, 1, 1},
		{"StartExecution", func() error {
			_, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: "exe_u", Scope: scope, Operation: "op", Fingerprint: "fp"})
			return err
		}, 1, 1},
		{"AppendEvents, two events", func() error {
			return s.AppendEvents(ctx, idem.AppendEventsParams{Org: scope.Org, Events: []idem.AuditEvent{
				{ExecutionID: "exe_u", Type: idem.EventRetried, Attempt: 2}, {ExecutionID: "exe_u", Type: idem.EventRetried, Attempt: 3}}})
		}, 1, 2}, // a row of idem_audit_events each (migration 008)
		{"FinishExecution, seven events", func() error {
			fin := finish
			fin.Org, fin.ExecutionID, fin.Events = scope.Org, "exe_u", make([]idem.AuditEvent, 7)
			for i := range fin.Events {
				fin.Events[i] = idem.AuditEvent{Type: idem.EventRetried, Attempt: i + 2}
			}
			return s.FinishExecution(ctx, fin)
		}, 1, 1},
		{"Transact, keyed first execution", func() error {
			_, err := s.Transact(ctx, reserve("k3"), func(ctx context.Context, tx any) idem.TxOutcome {
				if _, err := tx.(*sql.Tx).ExecContext(ctx, `INSERT INTO app_things (id) VALUES ('k3')`); err != nil {
					return idem.TxOutcome{Abort: true}
				}
				return idem.TxOutcome{Result: idem.CompleteParams{Status: http.StatusCreated, Body: []byte(`{}`), Finish: finish}}
			})
			return err
		}, 2, 2}, // the key's probe and the final record; the handler's row
		{"Transact, unkeyed", func() error {
			_, err := s.Transact(ctx, idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: "exe_t", Scope: scope, Operation: "op", Fingerprint: "fp"}},
				func(ctx context.Context, tx any) idem.TxOutcome {
					if _, err := tx.(*sql.Tx).ExecContext(ctx, `INSERT INTO app_things (id) VALUES ('t')`); err != nil {
						return idem.TxOutcome{Abort: true}
					}
					return idem.TxOutcome{Result: idem.CompleteParams{Finish: finish}}
				})
			return err
		}, 1, 2},
	} {
		before := changes()
		taken()
		if err := c.run(); err != nil {
			t.Fatalf("%s: %v", c.phase, err)
		}
		var own []string
		for _, st := range taken() {
			if !savepoint.MatchString(st.q) {
				own = append(own, strings.Join(strings.Fields(st.q), " "))
			}
		}
		rows := changes() - before
		if c.statements >= 0 && (len(own) != c.statements || rows != c.rows) {
			t.Errorf("%s: %d statements, %d rows changed; want %d, %d:\n%s", c.phase, len(own), rows, c.statements, c.rows, strings.Join(own, "\n"))
		}
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM idem_records`).Scan(&n); err != nil || n != 5 {
		t.Errorf("idem_records holds %d rows (%v), want one per execution: 5", n, err)
	}
}

// fullScan matches a plan step that reads idem_records whole.
var fullScan = regexp.MustCompile(`^SCAN idem_records\b`)

// Every statement the store runs on idem_records, across every method,
// finds its rows through an index (migration 005 says which serves
// which); none scans the table.
func TestStatementsUseIndexes(t *testing.T) {
	s, taken := traced(t)
	ctx := t.Context()
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	p := idem.ReserveParams{StartParams: idem.StartParams{ExecutionID: "exe_1", Scope: scope, Operation: "op", Fingerprint: "fp"},
		Key: "k1", Lease: time.Minute, Retention: time.Hour}
	res, err := s.Reserve(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	fence := idem.Fence{Scope: scope, Key: "k1", FencingToken: res.Attempt.FencingToken}
	finish := idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded}}}
	steps := []error{
		func() error { _, err := s.LeaseLeft(ctx, fence); return err }(),
		func() error {
			_, err := s.Complete(ctx, idem.CompleteParams{Scope: scope, Key: "k1", FencingToken: fence.FencingToken, Status: 200, Finish: finish})
			return err
		}(),
		func() error { _, err := s.Reserve(ctx, p); return err }(),
		func() error { _, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: "k1"}); return err }(),
		func() error {
			_, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: "exe_2", Scope: scope, Operation: "op", Fingerprint: "fp"})
			return err
		}(),
		s.AppendEvents(ctx, idem.AppendEventsParams{Org: "acme", Events: []idem.AuditEvent{{ExecutionID: "exe_2", Type: idem.EventRetried}}}),
		func() error { f := finish; f.Org, f.ExecutionID = "acme", "exe_2"; return s.FinishExecution(ctx, f) }(),
		func() error {
			_, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: "acme", ID: "exe_2"})
			return err
		}(),
		func() error {
			_, err := s.ListExecutions(ctx, idem.ListExecutionsParams{Org: "acme", Principal: "agent-1", Operation: "op", Outcome: idem.OutcomeSucceeded})
			return err
		}(),
		func() error {
			_, err := s.RequestApproval(ctx, idem.RequestApprovalParams{ID: "apr_1", Org: "acme", RequestedBy: "agent-1", Key: "k9", Operation: "op", Fingerprint: "fp", Reason: "r"})
			return err
		}(),
		func() error {
			q := p
			q.ExecutionID, q.Key = "exe_3", "k3"
			_, err := s.Transact(ctx, q, func(context.Context, any) idem.TxOutcome {
				return idem.TxOutcome{Result: idem.CompleteParams{Status: 200, Finish: finish}}
			})
			return err
		}(),
		func() error { _, err := s.Sweep(ctx, idem.SweepParams{AuditRetention: 7 * 24 * time.Hour}); return err }(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	// Release and settling a lease, on records of their own.
	for _, key := range []string{"k4", "k5"} {
		q := p
		q.ExecutionID, q.Key = "exe_"+key, key
		if _, err := s.Reserve(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: "k4"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, idem.ReleaseParams{Fence: idem.Fence{Scope: scope, Key: "k4", FencingToken: a.FencingToken}, Finish: finish}); err != nil {
		t.Fatal(err)
	}
	s.clock.(*fakeclock.Clock).Advance(2 * time.Hour)
	if _, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: "k5"}); err == nil {
		t.Fatal("k5 past retention still read")
	}
	settled := p
	settled.ExecutionID, settled.Key, settled.Retention = "exe_k6", "k6", 24*time.Hour
	if _, err := s.Reserve(ctx, settled); err != nil {
		t.Fatal(err)
	}
	s.clock.(*fakeclock.Clock).Advance(2 * time.Minute)
	if a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: "k6"}); err != nil || a.State != idem.AttemptIndeterminate {
		t.Fatalf("k6 past its lease = %+v, %v; want indeterminate", a, err)
	}
	again := p
	again.ExecutionID = "exe_1b"
	if res, err := s.Reserve(ctx, again); err != nil || !res.Reserved { // k1, forgotten
		t.Fatalf("Reserve of a forgotten key = %+v, %v", res, err)
	}

	seen := map[string]bool{}
	for _, st := range taken() {
		if !strings.Contains(st.q, "idem_records") || seen[st.q] {
			continue
		}
		seen[st.q] = true
		rows, err := s.r.QueryContext(ctx, `EXPLAIN QUERY PLAN `+st.q, st.args...)
		if err != nil {
			t.Fatalf("EXPLAIN %s: %v", st.q, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		for _, step := range plan {
			if fullScan.MatchString(step) {
				t.Errorf("%s\nscans idem_records:\n%s", strings.Join(strings.Fields(st.q), " "), strings.Join(plan, "\n"))
			}
		}
	}
	if len(seen) < 16 {
		t.Errorf("only %d statements on idem_records seen", len(seen))
	}
}
