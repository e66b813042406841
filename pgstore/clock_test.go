package pgstore_test

import (
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// Two instances whose own clocks are two minutes apart (-60 s and +60 s)
// judge leases by one clock, the database's: B does not see A's fresh
// reservation as past its one-minute lease (it would, by its own clock),
// the lease starts at the database's now, and A can still complete.
func TestSkewedInstancesAgreeOnLeases(t *testing.T) {
	url := pgtest.NewDatabase(t)
	open := func(skew time.Duration) *pgstore.Store {
		s, err := pgstore.OpenWithLocalClock(t.Context(), url, func() time.Time { return time.Now().Add(skew) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(-60*time.Second), open(60*time.Second)
	res, err := a.Reserve(t.Context(), reserveFor("skewed", 24*time.Hour))
	if err != nil || !res.Reserved {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	var dbNow time.Time
	if err := newPool(t, url).QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if d := res.Attempt.LeaseExpiresAt.Sub(dbNow.Add(time.Minute)); d > 5*time.Second || d < -5*time.Second {
		t.Errorf("lease ends %v, %s off the database's now + 1 min (%v): not the database's clock", res.Attempt.LeaseExpiresAt, d, dbNow.Add(time.Minute))
	}
	got, err := b.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "skewed"})
	if err != nil || got.State != idem.AttemptInFlight {
		t.Fatalf("B reads A's fresh reservation as %s (%v); want in flight", got.State, err)
	}
	f := idem.Fence{Scope: scope, Key: "skewed", FencingToken: res.Attempt.FencingToken}
	if left, err := b.LeaseLeft(t.Context(), f); err != nil || left < 50*time.Second {
		t.Fatalf("B: LeaseLeft = %s, %v; want most of the minute", left, err)
	}
	if _, err := a.Complete(t.Context(), idem.CompleteParams{Scope: scope, Key: "skewed", FencingToken: f.FencingToken, Status: 200, Body: []byte(`{}`),
		Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}); err != nil {
		t.Fatalf("A completes within its lease: %v", err)
	}
	if got, err := b.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "skewed"}); err != nil || got.State != idem.AttemptCompleted {
		t.Fatalf("B after A completed = %+v, %v", got, err)
	}
}
