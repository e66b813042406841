package metrics

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idem"
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
	start := time.Now()
	res, err := s.tx.Transact(ctx, p, run)
	s.observe("transact", start, err)
	return res, err
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

func (s *store) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	start := time.Now()
	res, err := s.next.Reserve(ctx, p)
	s.observe("reserve", start, err)
	return res, err
}

func (s *store) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	start := time.Now()
	a, err := s.next.Complete(ctx, p)
	s.observe("complete", start, err)
	return a, err
}

func (s *store) GetAttempt(ctx context.Context, scope idem.Scope, key string) (idem.Attempt, error) {
	start := time.Now()
	a, err := s.next.GetAttempt(ctx, scope, key)
	s.observe("get_attempt", start, err)
	return a, err
}

func (s *store) LeaseLeft(ctx context.Context, f idem.Fence) (time.Duration, error) {
	start := time.Now()
	d, err := s.next.LeaseLeft(ctx, f)
	s.observe("lease_left", start, err)
	return d, err
}

func (s *store) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	start := time.Now()
	x, err := s.next.StartExecution(ctx, p)
	s.observe("start_execution", start, err)
	return x, err
}

func (s *store) FinishExecution(ctx context.Context, p idem.FinishParams) error {
	start := time.Now()
	err := s.next.FinishExecution(ctx, p)
	s.observe("finish_execution", start, err)
	return err
}

func (s *store) AppendEvents(ctx context.Context, org string, events ...idem.AuditEvent) error {
	start := time.Now()
	err := s.next.AppendEvents(ctx, org, events...)
	s.observe("append_events", start, err)
	return err
}

func (s *store) GetExecution(ctx context.Context, org, id string) (idem.Execution, error) {
	start := time.Now()
	x, err := s.next.GetExecution(ctx, org, id)
	s.observe("get_execution", start, err)
	return x, err
}

func (s *store) ListExecutions(ctx context.Context, p idem.ListExecutionsParams) ([]idem.Execution, error) {
	start := time.Now()
	list, err := s.next.ListExecutions(ctx, p)
	s.observe("list_executions", start, err)
	return list, err
}

func (s *store) RequestApproval(ctx context.Context, p idem.RequestApprovalParams) (idem.Approval, bool, error) {
	start := time.Now()
	a, created, err := s.next.RequestApproval(ctx, p)
	s.observe("request_approval", start, err)
	return a, created, err
}

func (s *store) GetApproval(ctx context.Context, org, id string) (idem.Approval, error) {
	start := time.Now()
	a, err := s.next.GetApproval(ctx, org, id)
	s.observe("get_approval", start, err)
	return a, err
}

func (s *store) ListApprovals(ctx context.Context, p idem.ListApprovalsParams) ([]idem.Approval, error) {
	start := time.Now()
	as, err := s.next.ListApprovals(ctx, p)
	s.observe("list_approvals", start, err)
	return as, err
}

func (s *store) DecideApproval(ctx context.Context, p idem.DecideApprovalParams) (idem.Approval, error) {
	start := time.Now()
	a, err := s.next.DecideApproval(ctx, p)
	s.observe("decide_approval", start, err)
	return a, err
}

func (s *store) Sweep(ctx context.Context, p idem.SweepParams) (idem.SweepResult, error) {
	start := time.Now()
	res, err := s.next.Sweep(ctx, p)
	s.observe("sweep", start, err)
	return res, err
}

func (s *store) Ping(ctx context.Context) error {
	start := time.Now()
	err := s.next.Ping(ctx)
	s.observe("ping", start, err)
	return err
}

func (s *store) Close() error {
	start := time.Now()
	err := s.next.Close()
	s.observe("close", start, err)
	return err
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
