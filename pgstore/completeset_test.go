package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// batchFixture is a store whose completions have one worker, on a pool
// whose statements are counted, with a connection of its own (not
// counted) to hold rows and read notifications.
type batchFixture struct {
	t     *testing.T
	s     *pgstore.Store
	trace *tracer
	clock *fakeclock.Clock
	conn  *pgx.Conn
	scope idem.Scope
}

func newBatchFixture(t *testing.T) *batchFixture {
	url := pgtest.NewDatabase(t)
	f := &batchFixture{t: t, trace: &tracer{}, scope: idem.Scope{Org: "acme", Principal: "agent"},
		clock: fakeclock.New(time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC))}
	pool := openTraced(t, url, f.trace)
	var err error
	if f.s, err = pgstore.New(t.Context(), pool, idem.StoreConfig{Clock: f.clock}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.s.Close() })
	pgstore.SetCompletionWorkers(f.s, 1)
	if f.conn, err = pgx.Connect(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close(context.Background()) })
	return f
}

// reserve reserves key with lease.
func (f *batchFixture) reserve(key string, lease time.Duration) idem.Attempt {
	f.t.Helper()
	res, err := f.s.Reserve(f.t.Context(), idem.ReserveParams{
		StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: f.scope, Operation: "op", Fingerprint: "fp-" + key},
		Key:         key, Lease: lease, Retention: time.Hour,
	})
	if err != nil || !res.Reserved {
		f.t.Fatalf("reserve %s: %v, %v", key, res.Reserved, err)
	}
	return res.Attempt
}

// completion is the completion of a with n final events (attempts 1..n).
func (f *batchFixture) completion(a idem.Attempt, n int) idem.CompleteParams {
	fin := idem.FinishParams{Org: a.Scope.Org, ExecutionID: a.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: n}
	for i := range n {
		fin.Events = append(fin.Events, idem.AuditEvent{ExecutionID: a.ExecutionID, Type: idem.EventRetried, Attempt: i + 1})
	}
	return idem.CompleteParams{Scope: a.Scope, Key: a.Key, FencingToken: a.FencingToken, Status: 200 + n,
		Body: []byte(fmt.Sprintf(`{"n":%d}`, n)), Finish: fin}
}

// completeInOneBatch completes ps concurrently, all queued behind the
// completion of blocker, which waits for a row lock held meanwhile, so that
// the one worker takes them as one batch; queued is how many of ps wait
// for it (the others go elsewhere). It returns each call's answer, and the
// round trips (BEGIN and COMMIT apart) and statements sent once they were
// queued.
func (f *batchFixture) completeInOneBatch(blocker idem.Attempt, queued int, ps []idem.CompleteParams) (as []idem.Attempt, errs []error, roundTrips, statements int64) {
	t := f.t
	t.Helper()
	ctx := t.Context()
	lock, err := f.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `SELECT FROM idem_records WHERE org = $1 AND principal = $2 AND key = $3 AND held FOR UPDATE`,
		blocker.Scope.Org, blocker.Scope.Principal, blocker.Key); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := f.s.Complete(ctx, f.completion(blocker, 0)); err != nil {
			t.Errorf("blocker: %v", err)
		}
	})
	waitUntil(t, "the blocker waits for its row", func() bool {
		var n int
		err := f.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n == 1
	})
	as, errs = make([]idem.Attempt, len(ps)), make([]error, len(ps))
	for i, p := range ps {
		wg.Go(func() { as[i], errs[i] = f.s.Complete(ctx, p) })
	}
	waitUntil(t, fmt.Sprint(queued, " completions queued"), func() bool { return pgstore.QueuedCompletions(f.s) == queued })
	m := startMeasure(f.trace)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	roundTrips = f.trace.roundTrips.Load() - m.roundTrips - (f.trace.txOnly.Load() - m.txOnly)
	return as, errs, roundTrips, f.trace.statements.Load() - m.statements
}

// waitUntil polls cond until it holds, failing after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 10 s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkEvents checks that x's execution has its started event and then
// final events with attempts 1..n, in order.
func (f *batchFixture) checkEvents(a idem.Attempt, n int) {
	f.t.Helper()
	x, err := f.s.GetExecution(f.t.Context(), idem.GetExecutionParams{Org: a.Scope.Org, ID: a.ExecutionID})
	if err != nil {
		f.t.Fatal(err)
	}
	if x.Outcome != idem.OutcomeSucceeded || x.Attempts != n || x.FinishedAt == nil {
		f.t.Errorf("%s: execution %s, %d attempts, finished %v; want succeeded, %d, finished", a.Key, x.Outcome, x.Attempts, x.FinishedAt, n)
	}
	if len(x.Events) != n+1 || x.Events[0].Type != idem.EventStarted {
		f.t.Fatalf("%s: events %+v, want started and %d more", a.Key, x.Events, n)
	}
	for i, ev := range x.Events[1:] {
		if ev.Type != idem.EventRetried || ev.Attempt != i+1 || ev.ExecutionID != a.ExecutionID {
			f.t.Errorf("%s: event %d is %+v, want %s of attempt %d", a.Key, i+1, ev, idem.EventRetried, i+1)
		}
	}
}

// Concurrent completions that a worker takes together are one statement
// (besides BEGIN and COMMIT), whatever their events, and each lands whole.
func TestConcurrentCompletionsAreOneStatement(t *testing.T) {
	f := newBatchFixture(t)
	blocker := f.reserve("blocker", time.Minute)
	var as []idem.Attempt
	var ps []idem.CompleteParams
	for i := range 12 {
		a := f.reserve(fmt.Sprint("k", i), time.Minute)
		as = append(as, a)
		ps = append(ps, f.completion(a, i%7)) // 0 to 6 events: both forms of the single statement's events
	}
	got, errs, roundTrips, statements := f.completeInOneBatch(blocker, len(ps), ps)
	for i, a := range as {
		if errs[i] != nil {
			t.Fatalf("%s: %v", a.Key, errs[i])
		}
		if got[i].State != idem.AttemptCompleted || got[i].Status != ps[i].Status || string(got[i].Body) != string(ps[i].Body) ||
			got[i].Key != a.Key || got[i].CompletedAt.IsZero() {
			t.Errorf("%s: completed %+v", a.Key, got[i])
		}
		f.checkEvents(a, i%7)
	}
	if roundTrips != 1 || statements != 1 {
		t.Errorf("%d completions taken together sent %d round trips and %d statements, want 1 and 1",
			len(ps), roundTrips, statements)
	}
	if tx, calls := f.s.WriteStats(); calls-tx < int64(len(ps)-1) {
		t.Errorf("WriteStats = %d transactions for %d calls: the batch was not shared", tx, calls)
	}
}

// In one batch, each call gets its own answer: a wrong fencing token, a
// passed lease and a duplicate fail alone and write nothing, the others
// complete; a watched record is notified, an
// unwatched one is not; calls whose events name another execution
// complete through the single statement, which appends them there.
func TestCompletionBatchAnswersEachCaller(t *testing.T) {
	f := newBatchFixture(t)
	ctx := t.Context()
	blocker := f.reserve("blocker", time.Minute)
	short := f.reserve("lease-passed", time.Second)
	f.clock.Advance(2 * time.Second)
	ok1, ok2 := f.reserve("ok-1", time.Minute), f.reserve("ok-2", time.Minute)
	wrong, dup := f.reserve("wrong-token", time.Minute), f.reserve("duplicate", time.Minute)
	watched := f.reserve("watched", time.Minute)
	other := f.reserve("other", time.Minute)
	foreign, late := f.reserve("foreign", time.Minute), f.reserve("foreign-late", time.Minute)
	if err := f.s.Watch(ctx, f.scope, watched.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := f.conn.Exec(ctx, `LISTEN idem_completed`); err != nil {
		t.Fatal(err)
	}
	wrongP := f.completion(wrong, 1)
	wrongP.FencingToken += 1000
	// foreign's event names other's execution: Complete sends it alone at
	// once; late says it finishes other's execution, which only the
	// statement can tell is not its record's.
	foreignP := f.completion(foreign, 0)
	foreignP.Finish.Events = []idem.AuditEvent{{ExecutionID: other.ExecutionID, Type: "note.foreign"}}
	lateP := f.completion(late, 0)
	lateP.Finish.ExecutionID = other.ExecutionID
	lateP.Finish.Events = []idem.AuditEvent{{ExecutionID: other.ExecutionID, Type: "note.late"}}
	ps := []idem.CompleteParams{f.completion(ok1, 2), wrongP, f.completion(short, 1), f.completion(dup, 1), f.completion(dup, 1),
		f.completion(watched, 1), foreignP, lateP, f.completion(ok2, 5)}
	got, errs, _, _ := f.completeInOneBatch(blocker, len(ps)-1, ps)

	for _, i := range []int{0, 5, 6, 7, 8} {
		if errs[i] != nil || got[i].State != idem.AttemptCompleted {
			t.Errorf("%s: %v, %s; want completed", ps[i].Key, errs[i], got[i].State)
		}
	}
	for _, i := range []int{1, 2} {
		if !errors.Is(errs[i], idem.ErrFenced) {
			t.Errorf("%s: err = %v, want fenced", ps[i].Key, errs[i])
		}
	}
	if (errs[3] == nil) == (errs[4] == nil) || !errors.Is(errors.Join(errs[3], errs[4]), idem.ErrFenced) {
		t.Errorf("the duplicate completions: %v and %v, want one completed and one fenced", errs[3], errs[4])
	}
	// Nothing of the failed calls was written: their records are as
	// they were (lease-passed is read indeterminate now).
	for _, a := range []idem.Attempt{wrong, short} {
		r, err := f.s.GetAttempt(ctx, idem.GetAttemptParams{Scope: a.Scope, Key: a.Key})
		if err != nil || r.State == idem.AttemptCompleted || r.Status != 0 || r.Body != nil {
			t.Errorf("%s after its failed completion: %+v, %v", a.Key, r, err)
		}
	}
	f.checkEvents(ok1, 2)
	f.checkEvents(ok2, 5)
	f.checkEvents(watched, 1)
	f.checkEvents(dup, 1)
	x, err := f.s.GetExecution(ctx, idem.GetExecutionParams{Org: other.Scope.Org, ID: other.ExecutionID})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, ev := range x.Events {
		types[ev.Type] = true
	}
	if len(x.Events) != 3 || !types["note.foreign"] || !types["note.late"] {
		t.Errorf("other's execution has events %+v, want started, note.foreign and note.late", x.Events)
	}
	for _, a := range []idem.Attempt{foreign, late} {
		if x, err := f.s.GetExecution(ctx, idem.GetExecutionParams{Org: a.Scope.Org, ID: a.ExecutionID}); err != nil ||
			x.Outcome != idem.OutcomeSucceeded || len(x.Events) != 1 {
			t.Errorf("%s's own execution: %+v, %v; want succeeded with its started event only", a.Key, x, err)
		}
	}

	// Exactly one notification, the watched record's (the blocker and the
	// others are not watched).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := f.conn.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`[%q,%q,%q]`, watched.Scope.Org, watched.Scope.Principal, watched.Key); n.Payload != want {
		t.Errorf("notified %s, want %s", n.Payload, want)
	}
	qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if n, err := f.conn.WaitForNotification(qctx); err == nil {
		t.Errorf("a second notification: %s", n.Payload)
	}
}
