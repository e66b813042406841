package idem

import (
	"context"
	"time"
)

// StoreHook is called around every call of an observed store
// (ObserveStore): before it, with the call's context and the method's name
// in snake case (reserve, get_attempt, transact, …); it returns the
// context the store gets (a span's, say) and the function called with the
// call's error once the call returns. A hook must be cheap and safe for
// concurrent use.
type StoreHook func(ctx context.Context, method string) (context.Context, func(error))

// ObserveStore wraps s so that hook sees every call, and changes nothing
// else: arguments, results and errors pass through untouched. The wrapper
// is a Transactor exactly when s is one (its transact call spans the
// handler, which runs inside the transaction), and passes a
// CompletionFeed's calls on (a store without one gives no completions).
// It is the one store decorator: the engine's spans and the metrics'
// latencies are hooks.
func ObserveStore(s Store, hook StoreHook) Store {
	o := &observedStore{next: s, hook: hook}
	if t, ok := s.(Transactor); ok {
		return &observedTransactor{observedStore: o, tx: t}
	}
	return o
}

// ChainStoreHooks returns a hook that calls each of hooks in order (nil
// ones left out), the context of one passed to the next, and ends them in
// reverse order; nil when none is left.
func ChainStoreHooks(hooks ...StoreHook) StoreHook {
	var live []StoreHook
	for _, h := range hooks {
		if h != nil {
			live = append(live, h)
		}
	}
	switch len(live) {
	case 0:
		return nil
	case 1:
		return live[0]
	}
	return func(ctx context.Context, method string) (context.Context, func(error)) {
		ends := make([]func(error), len(live))
		for i, h := range live {
			ctx, ends[i] = h(ctx, method)
		}
		return ctx, func(err error) {
			for i := len(ends) - 1; i >= 0; i-- {
				ends[i](err)
			}
		}
	}
}

// TimeStore is a StoreHook made of a function told each call's method,
// latency and error, for metrics.
func TimeStore(observe func(method string, took time.Duration, err error)) StoreHook {
	return func(ctx context.Context, method string) (context.Context, func(error)) {
		start := time.Now()
		return ctx, func(err error) { observe(method, time.Since(start), err) }
	}
}

type observedStore struct {
	next Store
	hook StoreHook
}

type observedTransactor struct {
	*observedStore
	tx Transactor
}

var (
	_ Store          = (*observedStore)(nil)
	_ CompletionFeed = (*observedStore)(nil)
	_ Transactor     = (*observedTransactor)(nil)
)

// observe calls f, one method of the inner store, inside the hook.
func observe[T any](ctx context.Context, s *observedStore, method string, f func(context.Context) (T, error)) (T, error) {
	ctx, end := s.hook(ctx, method)
	v, err := f(ctx)
	end(err)
	return v, err
}

// observeErr is observe for the methods that return only an error.
func observeErr(ctx context.Context, s *observedStore, method string, f func(context.Context) error) error {
	ctx, end := s.hook(ctx, method)
	err := f(ctx)
	end(err)
	return err
}

func (s *observedTransactor) Transact(ctx context.Context, p ReserveParams, run TransactFunc) (TransactResult, error) {
	return observe(ctx, s.observedStore, "transact", func(ctx context.Context) (TransactResult, error) { return s.tx.Transact(ctx, p, run) })
}

func (s *observedStore) Reserve(ctx context.Context, p ReserveParams) (ReserveResult, error) {
	return observe(ctx, s, "reserve", func(ctx context.Context) (ReserveResult, error) { return s.next.Reserve(ctx, p) })
}

func (s *observedStore) Complete(ctx context.Context, p CompleteParams) (Attempt, error) {
	return observe(ctx, s, "complete", func(ctx context.Context) (Attempt, error) { return s.next.Complete(ctx, p) })
}

func (s *observedStore) Release(ctx context.Context, p ReleaseParams) error {
	return observeErr(ctx, s, "release", func(ctx context.Context) error { return s.next.Release(ctx, p) })
}

func (s *observedStore) GetAttempt(ctx context.Context, p GetAttemptParams) (Attempt, error) {
	return observe(ctx, s, "get_attempt", func(ctx context.Context) (Attempt, error) { return s.next.GetAttempt(ctx, p) })
}

func (s *observedStore) LeaseLeft(ctx context.Context, f Fence) (time.Duration, error) {
	return observe(ctx, s, "lease_left", func(ctx context.Context) (time.Duration, error) { return s.next.LeaseLeft(ctx, f) })
}

func (s *observedStore) StartExecution(ctx context.Context, p StartParams) (Execution, error) {
	return observe(ctx, s, "start_execution", func(ctx context.Context) (Execution, error) { return s.next.StartExecution(ctx, p) })
}

func (s *observedStore) FinishExecution(ctx context.Context, p FinishParams) error {
	return observeErr(ctx, s, "finish_execution", func(ctx context.Context) error { return s.next.FinishExecution(ctx, p) })
}

func (s *observedStore) AppendEvents(ctx context.Context, p AppendEventsParams) error {
	return observeErr(ctx, s, "append_events", func(ctx context.Context) error { return s.next.AppendEvents(ctx, p) })
}

func (s *observedStore) GetExecution(ctx context.Context, p GetExecutionParams) (Execution, error) {
	return observe(ctx, s, "get_execution", func(ctx context.Context) (Execution, error) { return s.next.GetExecution(ctx, p) })
}

func (s *observedStore) RecordExecutions(ctx context.Context, p RecordExecutionsParams) error {
	return observeErr(ctx, s, "record_executions", func(ctx context.Context) error { return s.next.RecordExecutions(ctx, p) })
}

func (s *observedStore) ListExecutions(ctx context.Context, p ListExecutionsParams) ([]Execution, error) {
	return observe(ctx, s, "list_executions", func(ctx context.Context) ([]Execution, error) { return s.next.ListExecutions(ctx, p) })
}

func (s *observedStore) RequestApproval(ctx context.Context, p RequestApprovalParams) (RequestApprovalResult, error) {
	return observe(ctx, s, "request_approval", func(ctx context.Context) (RequestApprovalResult, error) { return s.next.RequestApproval(ctx, p) })
}

func (s *observedStore) GetApproval(ctx context.Context, p GetApprovalParams) (Approval, error) {
	return observe(ctx, s, "get_approval", func(ctx context.Context) (Approval, error) { return s.next.GetApproval(ctx, p) })
}

func (s *observedStore) ListApprovals(ctx context.Context, p ListApprovalsParams) ([]Approval, error) {
	return observe(ctx, s, "list_approvals", func(ctx context.Context) ([]Approval, error) { return s.next.ListApprovals(ctx, p) })
}

func (s *observedStore) DecideApproval(ctx context.Context, p DecideApprovalParams) (Approval, error) {
	return observe(ctx, s, "decide_approval", func(ctx context.Context) (Approval, error) { return s.next.DecideApproval(ctx, p) })
}

func (s *observedStore) Sweep(ctx context.Context, p SweepParams) (SweepResult, error) {
	return observe(ctx, s, "sweep", func(ctx context.Context) (SweepResult, error) { return s.next.Sweep(ctx, p) })
}

func (s *observedStore) Ping(ctx context.Context) error {
	return observeErr(ctx, s, "ping", s.next.Ping)
}

func (s *observedStore) Close() error {
	return observeErr(context.Background(), s, "close", func(context.Context) error { return s.next.Close() })
}

// Completions passes on the inner store's completion feed, if it has one.
func (s *observedStore) Completions(ctx context.Context) <-chan ScopedKey {
	if f, ok := s.next.(CompletionFeed); ok {
		return f.Completions(ctx)
	}
	return nil
}

// Watch passes on to the inner store's completion feed, if it has one.
func (s *observedStore) Watch(ctx context.Context, scope Scope, key string) error {
	if f, ok := s.next.(CompletionFeed); ok {
		return f.Watch(ctx, scope, key)
	}
	return nil
}
