package metrics

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-run/idem"
)

// Values of the result label of idem_store_duration_seconds. Any other idem
// code a store returns is labelled with the code in lower case
// (approval_not_found, ...); an error that carries no code is "other".
const (
	ResultOK                    = "ok"
	ResultNotFound              = "not_found"
	ResultUnavailable           = "unavailable"
	ResultCancelled             = "cancelled"
	ResultFenced                = "fenced"
	ResultApprovalNotConsumable = "approval_not_consumable"
	ResultAttemptExists         = "attempt_exists"
	ResultKeyBusy               = "key_busy"
	ResultOther                 = "other"
)

// Store wraps s so that every call's latency is observed in
// idem_store_duration_seconds by method (the method's name in snake case:
// reserve, get_attempt, ...) and result. The wrapper implements
// idem.Store fully (every method, including Ping and Close) and changes
// nothing else: arguments, results and errors pass through untouched.
//
// When s is an idem.Transactor, so is the wrapper; its transact method's
// latency includes the handler's, which runs inside the transaction.
func (m *Metrics) Store(s idem.Store) idem.Store {
	w := &store{next: s, seconds: m.storeDuration}
	if t, ok := s.(idem.Transactor); ok {
		return &transactingStore{store: w, tx: t}
	}
	return w
}

// transactingStore is the instrumented store of an idem.Transactor.
type transactingStore struct {
	*store
	tx idem.Transactor
}

func (s *transactingStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return observed(s.store, "transact", func() (idem.TransactResult, error) { return s.tx.Transact(ctx, p, run) })
}

// store is the instrumented idem.Store.
type store struct {
	next    idem.Store
	seconds *prometheus.HistogramVec
}

var _ idem.Store = (*store)(nil)

// observe records one call of method that started at start and ended
// with err.
func (s *store) observe(method string, start time.Time, err error) {
	s.seconds.WithLabelValues(method, storeResult(err)).Observe(time.Since(start).Seconds())
}

// storeResult is the result label of a store call that returned err. A
// domain code comes first: a store that wraps a context error as
// STORE_UNAVAILABLE has judged it its own failure (a driver timeout), not
// the caller's cancellation.
func storeResult(err error) string {
	if err == nil {
		return ResultOK
	}
	switch {
	case errors.Is(err, idem.ErrFenced):
		return ResultFenced
	case errors.Is(err, idem.ErrApprovalNotConsumable):
		return ResultApprovalNotConsumable
	case errors.Is(err, idem.ErrAttemptExists):
		return ResultAttemptExists
	case errors.Is(err, idem.ErrKeyBusy):
		return ResultKeyBusy
	}
	var e *idem.Error
	if errors.As(err, &e) {
		switch {
		case e.Code == idem.CodeNotFound:
			return ResultNotFound
		case e.Code == idem.CodeStoreUnavailable:
			return ResultUnavailable
		case e.Code.Known():
			return strings.ToLower(string(e.Code))
		}
		return ResultOther
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ResultCancelled
	}
	return ResultOther
}

// observed calls f, the inner store's method, and records its latency
// under method; what f returns passes through untouched.
func observed[T any](s *store, method string, f func() (T, error)) (T, error) {
	start := time.Now()
	v, err := f()
	s.observe(method, start, err)
	return v, err
}

// observedErr is observed for the methods that return only an error.
func observedErr(s *store, method string, f func() error) error {
	start := time.Now()
	err := f()
	s.observe(method, start, err)
	return err
}

func (s *store) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	return observed(s, "reserve", func() (idem.ReserveResult, error) { return s.next.Reserve(ctx, p) })
}

func (s *store) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	return observed(s, "complete", func() (idem.Attempt, error) { return s.next.Complete(ctx, p) })
}

func (s *store) Release(ctx context.Context, p idem.ReleaseParams) error {
	return observedErr(s, "release", func() error { return s.next.Release(ctx, p) })
}

func (s *store) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	return observed(s, "get_attempt", func() (idem.Attempt, error) { return s.next.GetAttempt(ctx, p) })
}

func (s *store) LeaseLeft(ctx context.Context, f idem.Fence) (time.Duration, error) {
	return observed(s, "lease_left", func() (time.Duration, error) { return s.next.LeaseLeft(ctx, f) })
}

func (s *store) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	return observed(s, "start_execution", func() (idem.Execution, error) { return s.next.StartExecution(ctx, p) })
}

func (s *store) FinishExecution(ctx context.Context, p idem.FinishParams) error {
	return observedErr(s, "finish_execution", func() error { return s.next.FinishExecution(ctx, p) })
}

func (s *store) AppendEvents(ctx context.Context, p idem.AppendEventsParams) error {
	return observedErr(s, "append_events", func() error { return s.next.AppendEvents(ctx, p) })
}

func (s *store) GetExecution(ctx context.Context, p idem.GetExecutionParams) (idem.Execution, error) {
	return observed(s, "get_execution", func() (idem.Execution, error) { return s.next.GetExecution(ctx, p) })
}

func (s *store) ListExecutions(ctx context.Context, p idem.ListExecutionsParams) ([]idem.Execution, error) {
	return observed(s, "list_executions", func() ([]idem.Execution, error) { return s.next.ListExecutions(ctx, p) })
}

func (s *store) RequestApproval(ctx context.Context, p idem.RequestApprovalParams) (idem.RequestApprovalResult, error) {
	return observed(s, "request_approval", func() (idem.RequestApprovalResult, error) { return s.next.RequestApproval(ctx, p) })
}

func (s *store) GetApproval(ctx context.Context, p idem.GetApprovalParams) (idem.Approval, error) {
	return observed(s, "get_approval", func() (idem.Approval, error) { return s.next.GetApproval(ctx, p) })
}

func (s *store) ListApprovals(ctx context.Context, p idem.ListApprovalsParams) ([]idem.Approval, error) {
	return observed(s, "list_approvals", func() ([]idem.Approval, error) { return s.next.ListApprovals(ctx, p) })
}

func (s *store) DecideApproval(ctx context.Context, p idem.DecideApprovalParams) (idem.Approval, error) {
	return observed(s, "decide_approval", func() (idem.Approval, error) { return s.next.DecideApproval(ctx, p) })
}

func (s *store) Sweep(ctx context.Context, p idem.SweepParams) (idem.SweepResult, error) {
	return observed(s, "sweep", func() (idem.SweepResult, error) { return s.next.Sweep(ctx, p) })
}

func (s *store) Ping(ctx context.Context) error {
	return observedErr(s, "ping", func() error { return s.next.Ping(ctx) })
}

func (s *store) Close() error {
	return observedErr(s, "close", s.next.Close)
}

// Completions passes on the inner store's completion feed, if it has one.
func (s *store) Completions(ctx context.Context) <-chan idem.ScopedKey {
	if f, ok := s.next.(idem.CompletionFeed); ok {
		return f.Completions(ctx)
	}
	return nil
}

// Watch passes on to the inner store's completion feed, if it has one.
func (s *store) Watch(ctx context.Context, scope idem.Scope, key string) error {
	if f, ok := s.next.(idem.CompletionFeed); ok {
		return f.Watch(ctx, scope, key)
	}
	return nil
}
