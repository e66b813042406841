package pgstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// TestPhaseRoundTrips counts what each phase of a keyed execution sends:
// Reserve of a fresh key is one batch (BEGIN, the key's lock and one
// statement that reserves and starts the execution), then COMMIT, with or
// without an approval to consume; Complete and the unkeyed phases are one
// batch (BEGIN and one statement), then COMMIT: BEGIN travels with the
// first statement (issue 36 item 2).
func TestPhaseRoundTrips(t *testing.T) {
	url := pgtest.NewDatabase(t)
	var trace tracer
	pool := openTraced(t, url, &trace)
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC))
	s, err := pgstore.New(t.Context(), pool, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scope := idem.Scope{Org: "acme", Principal: "agent"}
	expect := func(name string, roundTrips, statements int64, call func() error) {
		t.Helper()
		m := startMeasure(&trace)
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, st, tc := trace.roundTrips.Load()-m.roundTrips, trace.statements.Load()-m.statements, trace.txControl.Load()-m.txControl
		// BEGIN travels in the batch; COMMIT is a round trip of its own.
		if r != roundTrips+1 || st != statements || tc != 2 {
			t.Errorf("%s sent %d round trips, %d statements and %d BEGIN/COMMIT; want %d, %d and 2",
				name, r, st, tc, roundTrips+1, statements)
		}
	}
	reserve := func(key, approval string) (res idem.ReserveResult, err error) {
		res, err = s.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "op", Fingerprint: "fp", ApprovalID: approval},
			Key:         key, Lease: time.Minute, Retention: time.Hour,
		})
		if err == nil && !res.Reserved {
			err = errors.New("not reserved")
		}
		return res, err
	}
	complete := func(res idem.ReserveResult, events int) error {
		fin := idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: events}
		for i := range events {
			fin.Events = append(fin.Events, idem.AuditEvent{Type: idem.EventRetried, Attempt: i + 2})
		}
		_, err := s.Complete(t.Context(), idem.CompleteParams{Scope: scope, Key: res.Attempt.Key,
			FencingToken: res.Attempt.FencingToken, Status: 200, Body: []byte(`{}`), Finish: fin})
		return err
	}

	var res idem.ReserveResult
	expect("Reserve", 1, 2, func() (err error) { res, err = reserve("k1", ""); return err })
	expect("Complete", 1, 1, func() error { return complete(res, 1) })
	expect("Reserve of a completed key", 1, 2, func() error {
		again, err := s.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_again", Scope: scope, Operation: "op", Fingerprint: "fp"},
			Key:         "k1", Lease: time.Minute, Retention: time.Hour,
		})
		if err == nil && again.Reserved {
			err = errors.New("a completed key was reserved again")
		}
		return err
	})
	expect("Reserve", 1, 2, func() (err error) { res, err = reserve("k2", ""); return err })
	expect("Complete with many events", 1, 1, func() error { return complete(res, 9) })

	requested, err := s.RequestApproval(t.Context(), idem.RequestApprovalParams{ID: "apr_1", Org: scope.Org, RequestedBy: scope.Principal,
		Operation: "op", Fingerprint: "fp", Reason: "r", Expiry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DecideApproval(t.Context(), idem.DecideApprovalParams{Org: scope.Org, ID: requested.Approval.ID,
		Decision: idem.Decision{Approve: true, By: "bob"}}); err != nil {
		t.Fatal(err)
	}
	expect("Reserve consuming an approval", 1, 2, func() error { _, err := reserve("k3", requested.Approval.ID); return err })

	var x idem.Execution
	expect("StartExecution", 1, 1, func() (err error) {
		x, err = s.StartExecution(t.Context(), idem.StartParams{ExecutionID: "exe_u", Scope: scope, Operation: "op", Fingerprint: "fp"})
		return err
	})
	expect("FinishExecution", 1, 1, func() error {
		return s.FinishExecution(t.Context(), idem.FinishParams{Org: scope.Org, ExecutionID: x.ID, Outcome: idem.OutcomeSucceeded,
			Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}})
	})
}

// TestFinishEventOfUnknownExecution: a final event that names an unknown
// execution fails FinishExecution with NOT_FOUND naming it, and nothing
// of the call is written, for a short list of events and a long one.
func TestFinishEventOfUnknownExecution(t *testing.T) {
	url := pgtest.NewDatabase(t)
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC))
	s, err := pgstore.Open(t.Context(), url, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scope := idem.Scope{Org: "acme", Principal: "agent"}
	for _, n := range []int{1, 8} {
		x, err := s.StartExecution(t.Context(), idem.StartParams{ExecutionID: "exe_" + strings.Repeat("x", n), Scope: scope, Operation: "op", Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		fin := idem.FinishParams{Org: scope.Org, ExecutionID: x.ID, Outcome: idem.OutcomeSucceeded, Attempts: 1}
		for range n - 1 {
			fin.Events = append(fin.Events, idem.AuditEvent{Type: idem.EventRetried})
		}
		fin.Events = append(fin.Events, idem.AuditEvent{ExecutionID: "exe_missing", Type: idem.EventSucceeded})
		if err := s.FinishExecution(t.Context(), fin); !errors.Is(err, idem.ErrNotFound) || !strings.Contains(err.Error(), "exe_missing") {
			t.Fatalf("%d events: err = %v, want NOT_FOUND naming exe_missing", n, err)
		}
		got, err := s.GetExecution(t.Context(), idem.GetExecutionParams{Org: scope.Org, ID: x.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.Outcome != idem.OutcomeRunning || len(got.Events) != 1 {
			t.Fatalf("%d events: a failed finish wrote %+v", n, got)
		}
	}
}
