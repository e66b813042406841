package pgstore_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// TestTransactRoundTrips counts what each kind of transactional execution
// sends (issue 36 item 2; docs/store.md, "Round trips per call"): the
// first round trip begins the transaction and reads (or reserves) the
// key, the last stores the outcome and commits; a business error pays one
// more, to roll back and begin again; no savepoint.
func TestTransactRoundTrips(t *testing.T) {
	url := pgtest.NewDatabase(t)
	var trace tracer
	pool := openTraced(t, url, &trace)
	clock := fakeclock.New(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	s, err := pgstore.New(t.Context(), pool, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	params := func(key, exe, approval string) idem.ReserveParams {
		return idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: exe, Scope: scope, Operation: "op", Fingerprint: "fp-" + exe, ApprovalID: approval},
			Key:         key, Lease: time.Minute, Retention: time.Hour,
		}
	}
	outcome := func(undo bool) idem.TransactFunc {
		return func(context.Context, any) idem.TxOutcome {
			status, out := http.StatusCreated, idem.OutcomeSucceeded
			if undo {
				status, out = http.StatusConflict, idem.OutcomeFailed
			}
			return idem.TxOutcome{Undo: undo, Result: idem.CompleteParams{Status: status, Body: []byte(`{}`),
				Finish: idem.FinishParams{Outcome: out, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}}
		}
	}
	abort := func(context.Context, any) idem.TxOutcome { return idem.TxOutcome{Abort: true} }
	approval := func(fp string) string {
		t.Helper()
		r, err := s.RequestApproval(t.Context(), idem.RequestApprovalParams{ID: "apr_" + fp, Org: scope.Org, RequestedBy: scope.Principal,
			Operation: "op", Fingerprint: fp, Reason: "r", Expiry: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DecideApproval(t.Context(), idem.DecideApprovalParams{Org: scope.Org, ID: r.Approval.ID,
			Decision: idem.Decision{Approve: true, By: "bob"}}); err != nil {
			t.Fatal(err)
		}
		return r.Approval.ID
	}
	apr := approval("fp-exe_apr")
	for _, c := range []struct {
		name                   string
		p                      idem.ReserveParams
		run                    idem.TransactFunc
		committed              bool
		roundTrips, statements int64
	}{
		// BEGIN + peek; insert_final + COMMIT.
		{"keyed first execution", params("k1", "exe_1", ""), outcome(false), true, 2, 4},
		// BEGIN + peek; ROLLBACK.
		{"keyed replay", params("k1", "exe_2", ""), outcome(false), false, 2, 3},
		// BEGIN + peek; ROLLBACK AND CHAIN + peek; insert_final + COMMIT.
		{"keyed business error", params("k2", "exe_3", ""), outcome(true), true, 3, 6},
		// BEGIN + peek; ROLLBACK; the rollback's NOTIFY to other
		// instances' waiters (issue 33 item 7).
		{"keyed failure (abort)", params("k3", "exe_4", ""), abort, false, 3, 4},
		// BEGIN + start_execution; finish_execution + COMMIT.
		{"unkeyed", params("", "exe_5", ""), outcome(false), true, 2, 4},
		// BEGIN + try lock + reserve_with_approval; complete + COMMIT.
		{"keyed, consuming an approval", params("k4", "exe_apr", apr), outcome(false), true, 2, 5},
	} {
		m := startMeasure(&trace)
		res, err := s.Transact(t.Context(), c.p, c.run)
		if err != nil || res.Committed != c.committed {
			t.Fatalf("%s: %+v, %v", c.name, res, err)
		}
		rt := trace.roundTrips.Load() - m.roundTrips
		st := trace.statements.Load() - m.statements + trace.txControl.Load() - m.txControl // BEGIN, COMMIT and ROLLBACK too
		t.Logf("%s: %d round trips, %d statements", c.name, rt, st)
		if rt != c.roundTrips || st != c.statements {
			t.Errorf("%s: %d round trips and %d statements, want %d and %d", c.name, rt, st, c.roundTrips, c.statements)
		}
	}
	// What committed is what the calls stored.
	for key, status := range map[string]int{"k1": http.StatusCreated, "k2": http.StatusConflict, "k4": http.StatusCreated} {
		if a, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: key}); err != nil || a.Status != status {
			t.Errorf("%s: %+v, %v; want status %d", key, a, err, status)
		}
	}
	if _, err := s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k3"}); err == nil {
		t.Error("an aborted execution left a record")
	}
}
