package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// The transactional path of SPEC §6.7: one transaction for the
// reservation, the handler's writes, the completion and the audit events.

func init() {
	register("TransactCommitsEverythingOnce", testTransactCommits)
	register("TransactReturnsTheRecordItStored", testTransactReturnsTheRecord)
	register("TransactAbortLeavesNothingAndFreesTheKey", testTransactAbort)
	register("TransactUndoStoresTheAnswerWithoutTheEffect", testTransactUndo)
	register("TransactBusyKeyAnswersAtOnce", testTransactBusy)
	register("TransactOnACompletedKeyNeverAnswersBusy", testTransactCompletedNeverBusy)
	register("TransactUnkeyed", testTransactUnkeyed)
	register("TransactSessionLostBeforeCommitLeavesNothing", testTransactSessionLost)
	register("TransactConsumesApprovalOnlyOnCommit", testTransactApproval)
	register("TransactTwoInstancesOneEffectPerKey", testTransactTwoInstances)
}

func transactor(t *testing.T, s idem.Store) idem.Transactor {
	t.Helper()
	tr, ok := s.(idem.Transactor)
	if !ok {
		t.Fatalf("%T does not implement idem.Transactor", s)
	}
	return tr
}

// succeed is a TransactFunc that writes effect and stores a 201.
func succeed(e *env, effect string) idem.TransactFunc {
	return func(ctx context.Context, tx any) idem.TxOutcome {
		if err := e.Effect(ctx, tx, effect); err != nil {
			return idem.TxOutcome{Abort: true}
		}
		return idem.TxOutcome{Result: txResult(http.StatusCreated, `{"data":{"effect":"`+effect+`"}}`)}
	}
}

func txResult(status int, body string) idem.CompleteParams {
	outcome, code, final := idem.OutcomeSucceeded, idem.Code(""), idem.EventSucceeded
	if status >= 400 {
		outcome, code, final = idem.OutcomeFailed, idem.CodeExecutionFailed, idem.EventFailed
	}
	return idem.CompleteParams{
		Status: status, Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body),
		Finish: idem.FinishParams{Outcome: outcome, Code: code, Attempts: 1,
			Events: []idem.AuditEvent{{Type: final, Code: code, Attempts: 1}}},
	}
}

func testTransactCommits(t *testing.T, e *env) {
	s := e.s(t)
	p := reserveParams(scopeA, "key-1", fpOne)
	res, err := transactor(t, s).Transact(ctx(t), p, succeed(e, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reserved || !res.Committed || res.Attempt.State != idem.AttemptCompleted || res.Attempt.Status != http.StatusCreated {
		t.Fatalf("Transact = %+v, want reserved, committed, completed 201", res)
	}
	got := mustGet(t, s, scopeA, "key-1")
	if got.State != idem.AttemptCompleted || string(got.Body) != `{"data":{"effect":"a"}}` || got.ExecutionID != p.ExecutionID || got.Attempts != 1 {
		t.Fatalf("record = %+v", got)
	}
	exe, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: p.ExecutionID})
	if err != nil {
		t.Fatal(err)
	}
	if exe.Outcome != idem.OutcomeSucceeded || exe.Key != "key-1" || exe.FinishedAt == nil {
		t.Errorf("execution = %+v", exe)
	}
	if types := eventTypes(exe); !slices.Equal(types, []string{idem.EventStarted, idem.EventSucceeded}) {
		t.Errorf("events = %v, want [started succeeded]", types)
	}
	// The same key again: the record answers, the function never runs.
	again := reserveParams(scopeA, "key-1", fpOne)
	res, err = transactor(t, s).Transact(ctx(t), again, func(context.Context, any) idem.TxOutcome {
		t.Error("the function ran for a key that has a record")
		return idem.TxOutcome{Abort: true}
	})
	if err != nil || res.Reserved || res.Attempt.ExecutionID != p.ExecutionID || res.Attempt.State != idem.AttemptCompleted {
		t.Fatalf("Transact of a completed key = %+v, %v; want the record, not reserved", res, err)
	}
	if got := e.Effects(t); !slices.Equal(got, []string{"a"}) {
		t.Errorf("effects = %v, want [a]", got)
	}
}

// The record a committed Transact returns (which the runner's replay cache
// keeps) is the one the store holds, field for field: a store may build it
// from what it wrote rather than read it back, at the store's precision.
func testTransactReturnsTheRecord(t *testing.T, e *env) {
	s := e.s(t)
	p := reserveParams(scopeA, "key-1", fpOne)
	p.FingerprintVersion = 2
	res, err := transactor(t, s).Transact(ctx(t), p, func(ctx context.Context, tx any) idem.TxOutcome {
		if err := e.Effect(ctx, tx, "a"); err != nil {
			return idem.TxOutcome{Abort: true}
		}
		r := txResult(http.StatusCreated, "\x00sealed\xff")
		r.Headers.Set("Location", "/v1/things/a")
		r.Headers.Set("X-Not-Replayed", "1")
		r.SealedKeyID, r.SecretWindow = "k1", 15*time.Minute+time.Nanosecond
		return idem.TxOutcome{Result: r}
	})
	if err != nil || !res.Committed {
		t.Fatalf("Transact = %+v, %v", res, err)
	}
	if got := mustGet(t, s, scopeA, "key-1"); !reflect.DeepEqual(res.Attempt, got) {
		t.Errorf("Transact returned\n%+v\nthe store holds\n%+v", res.Attempt, got)
	}
	// Past retention the record lets the key go: the key runs afresh,
	// and the new record is returned as held too.
	e.clock.Advance(keepFor + time.Hour)
	again := reserveParams(scopeA, "key-1", fpOne)
	res, err = transactor(t, s).Transact(ctx(t), again, succeed(e, "b"))
	if err != nil || !res.Committed || res.Attempt.ExecutionID != again.ExecutionID {
		t.Fatalf("Transact past retention = %+v, %v; want a fresh, committed run", res, err)
	}
	if got := mustGet(t, s, scopeA, "key-1"); !reflect.DeepEqual(res.Attempt, got) {
		t.Errorf("Transact past retention returned\n%+v\nthe store holds\n%+v", res.Attempt, got)
	}
}

func testTransactAbort(t *testing.T, e *env) {
	s := e.s(t)
	p := reserveParams(scopeA, "key-1", fpOne)
	res, err := transactor(t, s).Transact(ctx(t), p, func(ctx context.Context, tx any) idem.TxOutcome {
		if err := e.Effect(ctx, tx, "lost"); err != nil {
			t.Errorf("effect: %v", err)
		}
		return idem.TxOutcome{Abort: true}
	})
	if err != nil || !res.Reserved || res.Committed {
		t.Fatalf("aborted Transact = %+v, %v; want reserved, not committed", res, err)
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-1"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("GetAttempt after an abort: %v, want NOT_FOUND (no record)", err)
	}
	if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: p.ExecutionID}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("GetExecution after an abort: %v, want NOT_FOUND", err)
	}
	if got := e.Effects(t); len(got) != 0 {
		t.Fatalf("effects after an abort = %v, want none", got)
	}
	// The key is free: the same request runs afresh.
	res, err = transactor(t, s).Transact(ctx(t), reserveParams(scopeA, "key-1", fpOne), succeed(e, "b"))
	if err != nil || !res.Committed {
		t.Fatalf("Transact after an abort = %+v, %v; want a fresh, committed run", res, err)
	}
	if got := e.Effects(t); !slices.Equal(got, []string{"b"}) {
		t.Errorf("effects = %v, want [b]", got)
	}
}

func testTransactUndo(t *testing.T, e *env) {
	s := e.s(t)
	res, err := transactor(t, s).Transact(ctx(t), reserveParams(scopeA, "key-1", fpOne), func(ctx context.Context, tx any) idem.TxOutcome {
		if err := e.Effect(ctx, tx, "undone"); err != nil {
			t.Errorf("effect: %v", err)
		}
		return idem.TxOutcome{Undo: true, Result: txResult(http.StatusConflict, `{"code":"SLUG_TAKEN"}`)}
	})
	if err != nil || !res.Committed {
		t.Fatalf("Transact = %+v, %v", res, err)
	}
	got := mustGet(t, s, scopeA, "key-1")
	if got.State != idem.AttemptCompleted || got.Status != http.StatusConflict {
		t.Fatalf("record = %+v, want the 409 completed", got)
	}
	if effects := e.Effects(t); len(effects) != 0 {
		t.Errorf("effects = %v, want none (undone)", effects)
	}
}

func testTransactBusy(t *testing.T, e *env) {
	s := e.s(t)
	entered, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		res, err := transactor(t, s).Transact(context.Background(), reserveParams(scopeA, "key-1", fpOne), func(ctx context.Context, tx any) idem.TxOutcome {
			close(entered)
			<-release
			return succeed(e, "first")(ctx, tx)
		})
		if err == nil && !res.Committed {
			err = errors.New("not committed")
		}
		first <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first execution's function never ran")
	}
	// While it holds the key, uncommitted: a same-key transaction answers
	// busy, before the first one ends (release is still open), and a read
	// finds no record.
	second := make(chan error, 1)
	go func() {
		_, err := transactor(t, s).Transact(context.Background(), reserveParams(scopeA, "key-1", fpOne), func(context.Context, any) idem.TxOutcome {
			t.Error("a second execution ran while the first held the key")
			return idem.TxOutcome{Abort: true}
		})
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, idem.ErrKeyBusy) {
			t.Errorf("same-key Transact while the first runs: %v, want ErrKeyBusy", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the same-key Transact waited behind the open transaction instead of answering busy")
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-1"}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("GetAttempt while uncommitted: %v, want NOT_FOUND", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first: %v", err)
	}
	if got := mustGet(t, s, scopeA, "key-1"); got.State != idem.AttemptCompleted {
		t.Errorf("record after the commit = %+v", got)
	}
}

func testTransactUnkeyed(t *testing.T, e *env) {
	s := e.s(t)
	p := reserveParams(scopeA, "", fpOne)
	p.Lease, p.Retention = 0, 0
	res, err := transactor(t, s).Transact(ctx(t), p, succeed(e, "u"))
	if err != nil || !res.Committed {
		t.Fatalf("unkeyed Transact = %+v, %v", res, err)
	}
	exe, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: p.ExecutionID})
	if err != nil || exe.Outcome != idem.OutcomeSucceeded || exe.Key != "" {
		t.Fatalf("execution = %+v, %v", exe, err)
	}
	aborted := reserveParams(scopeA, "", fpOne)
	aborted.Lease, aborted.Retention = 0, 0
	res, err = transactor(t, s).Transact(ctx(t), aborted, func(ctx context.Context, tx any) idem.TxOutcome {
		_ = e.Effect(ctx, tx, "lost")
		return idem.TxOutcome{Abort: true}
	})
	if err != nil || res.Committed {
		t.Fatalf("aborted unkeyed Transact = %+v, %v", res, err)
	}
	if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: aborted.ExecutionID}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("aborted execution: %v, want NOT_FOUND", err)
	}
	if got := e.Effects(t); !slices.Equal(got, []string{"u"}) {
		t.Errorf("effects = %v, want [u]", got)
	}
}

func testTransactApproval(t *testing.T, e *env) {
	s := e.s(t)
	ap := approvedApproval(t, e, scopeA.Principal, fpOne)
	p := reserveParams(scopeA, "key-1", fpOne)
	p.ApprovalID = ap.ID
	res, err := transactor(t, s).Transact(ctx(t), p, func(context.Context, any) idem.TxOutcome { return idem.TxOutcome{Abort: true} })
	if err != nil || res.Committed {
		t.Fatalf("aborted Transact = %+v, %v", res, err)
	}
	if got, err := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: ap.ID}); err != nil || got.Status != idem.ApprovalApproved {
		t.Fatalf("approval after an abort = %+v, %v; want still approved", got, err)
	}
	p2 := reserveParams(scopeA, "key-1", fpOne)
	p2.ApprovalID = ap.ID
	if res, err := transactor(t, s).Transact(ctx(t), p2, succeed(e, "a")); err != nil || !res.Committed {
		t.Fatalf("Transact = %+v, %v", res, err)
	}
	if got, err := s.GetApproval(ctx(t), idem.GetApprovalParams{Org: "acme", ID: ap.ID}); err != nil || got.Status != idem.ApprovalConsumed || got.ExecutionID == nil || *got.ExecutionID != p2.ExecutionID {
		t.Fatalf("approval after the commit = %+v, %v; want consumed by %s", got, err, p2.ExecutionID)
	}
	p3 := reserveParams(scopeA, "key-2", fpOne)
	p3.ApprovalID = ap.ID
	if _, err := transactor(t, s).Transact(ctx(t), p3, succeed(e, "b")); !errors.Is(err, idem.ErrApprovalNotConsumable) {
		t.Fatalf("Transact with a consumed approval: %v, want ErrApprovalNotConsumable", err)
	}
	if got := e.Effects(t); !slices.Equal(got, []string{"a"}) {
		t.Errorf("effects = %v, want [a]", got)
	}
}

func testTransactTwoInstances(t *testing.T, e *env) {
	one, two := e.Open(t, e.clock), e.Open(t, e.clock)
	const n = 8
	errs := make(chan error, 2*n)
	start := make(chan struct{})
	for i := range 2 * n {
		s := one
		if i%2 == 1 {
			s = two
		}
		go func() {
			<-start
			_, err := transactor(t, s).Transact(context.Background(), reserveParams(scopeA, "key-1", fpOne), succeed(e, "x"))
			if errors.Is(err, idem.ErrKeyBusy) {
				err = nil
			}
			errs <- err
		}()
	}
	close(start)
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Errorf("Transact: %v", err)
		}
	}
	if got := e.Effects(t); !slices.Equal(got, []string{"x"}) {
		t.Errorf("effects = %v, want exactly one", got)
	}
}

// Same-key calls on a committed record all answer from it, even when
// they meet each other holding the key: none is busy.
func testTransactCompletedNeverBusy(t *testing.T, e *env) {
	s := e.s(t)
	if res, err := transactor(t, s).Transact(ctx(t), reserveParams(scopeA, "key-1", fpOne), succeed(e, "a")); err != nil || !res.Committed {
		t.Fatalf("Transact = %+v, %v", res, err)
	}
	const callers, rounds = 16, 10
	errs := make(chan error, callers*rounds)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range rounds {
				res, err := transactor(t, s).Transact(context.Background(), reserveParams(scopeA, "key-1", fpOne), succeed(e, "again"))
				if err == nil && (res.Reserved || res.Attempt.State != idem.AttemptCompleted) {
					err = fmt.Errorf("Transact of a completed key = %+v", res)
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	busy := 0
	for err := range errs {
		switch {
		case errors.Is(err, idem.ErrKeyBusy):
			busy++
		case err != nil:
			t.Error(err)
		}
	}
	if busy > 0 {
		t.Errorf("%d of %d same-key calls on a completed record answered busy, want 0", busy, callers*rounds)
	}
}

// A session that dies inside the transaction (its process crashed before
// the commit) leaves no record, no execution and no effect: the key runs
// afresh.
func testTransactSessionLost(t *testing.T, e *env) {
	if e.Crash == nil {
		t.Skip("the store's transaction cannot outlive its process; the end-to-end crash tests kill it")
	}
	s := e.s(t)
	p := reserveParams(scopeA, "key-1", fpOne)
	_, err := transactor(t, s).Transact(ctx(t), p, func(ctx context.Context, tx any) idem.TxOutcome {
		if err := e.Effect(ctx, tx, "lost"); err != nil {
			t.Errorf("effect: %v", err)
		}
		e.Crash(ctx, tx)
		return idem.TxOutcome{Result: txResult(http.StatusCreated, `{}`)}
	})
	if err == nil {
		t.Fatal("Transact whose session died before the commit returned no error")
	}
	if _, err := s.GetAttempt(ctx(t), idem.GetAttemptParams{Scope: scopeA, Key: "key-1"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after a lost session: %v, want none", err)
	}
	if _, err := s.GetExecution(ctx(t), idem.GetExecutionParams{Org: "acme", ID: p.ExecutionID}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("execution after a lost session: %v, want none", err)
	}
	if got := e.Effects(t); len(got) != 0 {
		t.Fatalf("effects after a lost session = %v, want none", got)
	}
	res, err := transactor(t, s).Transact(ctx(t), reserveParams(scopeA, "key-1", fpOne), succeed(e, "b"))
	if err != nil || !res.Committed {
		t.Fatalf("Transact after a lost session = %+v, %v; want a fresh, committed run", res, err)
	}
}
