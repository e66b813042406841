package sqlitestore

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

// Executions past the audit retention go oldest first, at most BatchSize
// per round, each with all its events; the rest stay whole.
func TestAuditRetentionBatches(t *testing.T) {
	const window = 7 * 24 * time.Hour
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	scope := idem.Scope{Org: "acme", Principal: "agent"}
	var ids []string
	for i := range 25 {
		clock.Advance(time.Minute)
		x, err := s.StartExecution(t.Context(), idem.StartParams{ExecutionID: fmt.Sprint("exe_", i), Scope: scope, Operation: "op", Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishExecution(t.Context(), idem.FinishParams{Org: scope.Org, ExecutionID: x.ID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
			Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}, {Type: idem.EventReplayed}}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, x.ID)
	}
	// The last five started within the window.
	clock.Advance(window - 5*time.Minute)
	for round, want := range []int{10, 10, 0} {
		r, err := s.Sweep(t.Context(), idem.SweepParams{BatchSize: 10, AuditRetention: window})
		if err != nil {
			t.Fatal(err)
		}
		if r.ExecutionsRemoved != want || r.EventsRemoved != 3*want || r.Done(10) != (want < 10) {
			t.Fatalf("round %d: %+v (done %v); want %d executions and %d events", round, r, r.Done(10), want, 3*want)
		}
	}
	for i, id := range ids {
		x, err := s.GetExecution(t.Context(), idem.GetExecutionParams{Org: scope.Org, ID: id})
		switch {
		case i < 20 && !errors.Is(err, idem.ErrNotFound):
			t.Fatalf("%s past the window: err = %v, want NOT_FOUND", id, err)
		case i >= 20 && (err != nil || len(x.Events) != 3):
			t.Fatalf("%s within the window = %+v, %v; want it with its 3 events", id, x, err)
		}
	}
	var events int
	if err := s.r.QueryRowContext(t.Context(), `SELECT sum(json_array_length(events)) FROM idem_records`).Scan(&events); err != nil || events != 15 {
		t.Fatalf("%d events left (%v), want the 15 of the executions within the window", events, err)
	}
}
