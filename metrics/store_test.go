package metrics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/sqlitetest"
	"github.com/idem-run/idem/sqlitestore"
	"github.com/idem-run/idem/storetest"
)

// fakeStore answers every method with err and a fixed result, and records
// what it was called with.
type fakeStore struct {
	err error

	mu    sync.Mutex
	calls []call
}

// call is one method call as the fake store received it.
type call struct {
	method string
	// ctxValue is ctxKey's value in the call's context.
	ctxValue any
	args     []any
}

type ctxKey struct{}

var _ idem.Store = (*fakeStore)(nil)

// Fixed results, distinct per method.
var (
	fakeAttempt   = idem.Attempt{ExecutionID: "exe_attempt", Key: "k1", Status: 201, FencingToken: 7}
	fakeExecution = idem.Execution{ID: "exe_1", Operation: "order.refund"}
	fakeApproval  = idem.Approval{ID: "apr_1", Operation: "order.refund"}
	fakeRequest   = idem.RequestApprovalResult{Approval: fakeApproval, Created: true}
	fakeReserve   = idem.ReserveResult{Attempt: fakeAttempt, Reserved: true, Execution: fakeExecution}
	fakeLeaseLeft = 3 * time.Second
	fakeSweep     = idem.SweepResult{Forgotten: 1, SecretsDestroyed: 2, LeasesExpired: 3, ApprovalsExpired: 4}
)

func (f *fakeStore) record(ctx context.Context, method string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := call{method: method, args: args}
	if ctx != nil {
		c.ctxValue = ctx.Value(ctxKey{})
	}
	f.calls = append(f.calls, c)
	return f.err
}

func (f *fakeStore) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	return fakeReserve, f.record(ctx, "Reserve", p)
}

func (f *fakeStore) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	return fakeAttempt, f.record(ctx, "Complete", p)
}

func (f *fakeStore) Release(ctx context.Context, p idem.ReleaseParams) error {
	return f.record(ctx, "Release", p)
}

func (f *fakeStore) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	return fakeAttempt, f.record(ctx, "GetAttempt", p)
}

func (f *fakeStore) LeaseLeft(ctx context.Context, fence idem.Fence) (time.Duration, error) {
	return fakeLeaseLeft, f.record(ctx, "LeaseLeft", fence)
}

func (f *fakeStore) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	return fakeExecution, f.record(ctx, "StartExecution", p)
}

func (f *fakeStore) FinishExecution(ctx context.Context, p idem.FinishParams) error {
	return f.record(ctx, "FinishExecution", p)
}

func (f *fakeStore) AppendEvents(ctx context.Context, p idem.AppendEventsParams) error {
	return f.record(ctx, "AppendEvents", p)
}

func (f *fakeStore) RecordExecutions(ctx context.Context, p idem.RecordExecutionsParams) error {
	return f.record(ctx, "RecordExecutions", p)
}

func (f *fakeStore) GetExecution(ctx context.Context, p idem.GetExecutionParams) (idem.Execution, error) {
	return fakeExecution, f.record(ctx, "GetExecution", p)
}

func (f *fakeStore) ListExecutions(ctx context.Context, p idem.ListExecutionsParams) ([]idem.Execution, error) {
	return []idem.Execution{fakeExecution}, f.record(ctx, "ListExecutions", p)
}

func (f *fakeStore) RequestApproval(ctx context.Context, p idem.RequestApprovalParams) (idem.RequestApprovalResult, error) {
	return fakeRequest, f.record(ctx, "RequestApproval", p)
}

func (f *fakeStore) GetApproval(ctx context.Context, p idem.GetApprovalParams) (idem.Approval, error) {
	return fakeApproval, f.record(ctx, "GetApproval", p)
}

func (f *fakeStore) ListApprovals(ctx context.Context, p idem.ListApprovalsParams) ([]idem.Approval, error) {
	return []idem.Approval{fakeApproval}, f.record(ctx, "ListApprovals", p)
}

func (f *fakeStore) DecideApproval(ctx context.Context, p idem.DecideApprovalParams) (idem.Approval, error) {
	return fakeApproval, f.record(ctx, "DecideApproval", p)
}

func (f *fakeStore) Sweep(ctx context.Context, p idem.SweepParams) (idem.SweepResult, error) {
	return fakeSweep, f.record(ctx, "Sweep", p)
}

func (f *fakeStore) Ping(ctx context.Context) error {
	return f.record(ctx, "Ping")
}

func (f *fakeStore) Close() error {
	return f.record(nil, "Close")
}

// storeMethod is one idem.Store method: how to call it, what the fake must
// receive and what the caller must get back.
type storeMethod struct {
	label string // the method label
	name  string // the Go method
	call  func(ctx context.Context, s idem.Store) ([]any, error)
	args  []any
	// results are the non-error results the fake returns.
	results []any
	// noCtx marks Close, which takes no context.
	noCtx bool
}

var (
	scope  = idem.Scope{Org: "acme", Principal: "agent-1"}
	start  = idem.StartParams{ExecutionID: "exe_1", Scope: scope, Operation: "order.refund", Fingerprint: "fp"}
	events = []idem.AuditEvent{{ExecutionID: "exe_1", Type: idem.EventReplayed}}
)

// storeMethods lists every method of idem.Store.
var storeMethods = []storeMethod{
	{
		label: "reserve", name: "Reserve",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			r, err := s.Reserve(ctx, idem.ReserveParams{StartParams: start, Key: "k1"})
			return []any{r}, err
		},
		args: []any{idem.ReserveParams{StartParams: start, Key: "k1"}}, results: []any{fakeReserve},
	},
	{
		label: "complete", name: "Complete",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			a, err := s.Complete(ctx, idem.CompleteParams{Scope: scope, Key: "k1", FencingToken: 7, Status: 201})
			return []any{a}, err
		},
		args: []any{idem.CompleteParams{Scope: scope, Key: "k1", FencingToken: 7, Status: 201}}, results: []any{fakeAttempt},
	},
	{
		label: "release", name: "Release",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			return nil, s.Release(ctx, idem.ReleaseParams{Fence: idem.Fence{Scope: scope, Key: "k1", FencingToken: 7}})
		},
		args: []any{idem.ReleaseParams{Fence: idem.Fence{Scope: scope, Key: "k1", FencingToken: 7}}},
	},
	{
		label: "get_attempt", name: "GetAttempt",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			a, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: "k1"})
			return []any{a}, err
		},
		args: []any{idem.GetAttemptParams{Scope: scope, Key: "k1"}}, results: []any{fakeAttempt},
	},
	{
		label: "lease_left", name: "LeaseLeft",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			d, err := s.LeaseLeft(ctx, idem.Fence{Scope: scope, Key: "k1", FencingToken: 7})
			return []any{d}, err
		},
		args: []any{idem.Fence{Scope: scope, Key: "k1", FencingToken: 7}}, results: []any{fakeLeaseLeft},
	},
	{
		label: "start_execution", name: "StartExecution",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			x, err := s.StartExecution(ctx, start)
			return []any{x}, err
		},
		args: []any{start}, results: []any{fakeExecution},
	},
	{
		label: "finish_execution", name: "FinishExecution",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			return nil, s.FinishExecution(ctx, idem.FinishParams{Org: "acme", ExecutionID: "exe_1", Attempts: 2})
		},
		args: []any{idem.FinishParams{Org: "acme", ExecutionID: "exe_1", Attempts: 2}},
	},
	{
		label: "append_events", name: "AppendEvents",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			return nil, s.AppendEvents(ctx, idem.AppendEventsParams{Org: "acme", Events: events})
		},
		args: []any{idem.AppendEventsParams{Org: "acme", Events: events}},
	},
	{
		label: "record_executions", name: "RecordExecutions",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			return nil, s.RecordExecutions(ctx, idem.RecordExecutionsParams{Executions: []idem.FinishedExecution{{Start: start}}})
		},
		args: []any{idem.RecordExecutionsParams{Executions: []idem.FinishedExecution{{Start: start}}}},
	},
	{
		label: "get_execution", name: "GetExecution",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			x, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: "acme", ID: "exe_1"})
			return []any{x}, err
		},
		args: []any{idem.GetExecutionParams{Org: "acme", ID: "exe_1"}}, results: []any{fakeExecution},
	},
	{
		label: "list_executions", name: "ListExecutions",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			xs, err := s.ListExecutions(ctx, idem.ListExecutionsParams{Org: "acme", Operation: "order.refund", Limit: 5})
			return []any{xs}, err
		},
		args: []any{idem.ListExecutionsParams{Org: "acme", Operation: "order.refund", Limit: 5}}, results: []any{[]idem.Execution{fakeExecution}},
	},
	{
		label: "request_approval", name: "RequestApproval",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			r, err := s.RequestApproval(ctx, idem.RequestApprovalParams{ID: "apr_1", Org: "acme"})
			return []any{r}, err
		},
		args: []any{idem.RequestApprovalParams{ID: "apr_1", Org: "acme"}}, results: []any{fakeRequest},
	},
	{
		label: "get_approval", name: "GetApproval",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			a, err := s.GetApproval(ctx, idem.GetApprovalParams{Org: "acme", ID: "apr_1"})
			return []any{a}, err
		},
		args: []any{idem.GetApprovalParams{Org: "acme", ID: "apr_1"}}, results: []any{fakeApproval},
	},
	{
		label: "list_approvals", name: "ListApprovals",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			as, err := s.ListApprovals(ctx, idem.ListApprovalsParams{Org: "acme", Limit: 5})
			return []any{as}, err
		},
		args: []any{idem.ListApprovalsParams{Org: "acme", Limit: 5}}, results: []any{[]idem.Approval{fakeApproval}},
	},
	{
		label: "decide_approval", name: "DecideApproval",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			a, err := s.DecideApproval(ctx, idem.DecideApprovalParams{Org: "acme", ID: "apr_1"})
			return []any{a}, err
		},
		args: []any{idem.DecideApprovalParams{Org: "acme", ID: "apr_1"}}, results: []any{fakeApproval},
	},
	{
		label: "sweep", name: "Sweep",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			r, err := s.Sweep(ctx, idem.SweepParams{BatchSize: 10})
			return []any{r}, err
		},
		args: []any{idem.SweepParams{BatchSize: 10}}, results: []any{fakeSweep},
	},
	{
		label: "ping", name: "Ping",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			return nil, s.Ping(ctx)
		},
	},
	{
		label: "close", name: "Close",
		call: func(ctx context.Context, s idem.Store) ([]any, error) {
			return nil, s.Close()
		},
		noCtx: true,
	},
}

// TestStoreMethodsListed keeps storeMethods in step with idem.Store, so
// that a method added to the interface is tested here too.
func TestStoreMethodsListed(t *testing.T) {
	iface := reflect.TypeFor[idem.Store]()
	listed := map[string]bool{}
	for _, m := range storeMethods {
		listed[m.name] = true
	}
	if len(listed) != iface.NumMethod() {
		t.Errorf("storeMethods lists %d methods, idem.Store has %d", len(listed), iface.NumMethod())
	}
	for i := range iface.NumMethod() {
		if name := iface.Method(i).Name; !listed[name] {
			t.Errorf("idem.Store.%s is not in storeMethods", name)
		}
	}
}

func TestStore(t *testing.T) {
	errPlain := errors.New("disk on fire")
	results := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ResultOK},
		{"not found", idem.Errorf(idem.CodeNotFound, "no such execution"), ResultNotFound},
		{"wrapped not found", fmt.Errorf("get: %w", idem.Errorf(idem.CodeNotFound, "no such execution")), ResultNotFound},
		{"unavailable", idem.Unavailable("x", errPlain), ResultUnavailable},
		{"unavailable from a driver timeout", idem.Unavailable("x", context.DeadlineExceeded), ResultUnavailable},
		{"another domain code", idem.Errorf(idem.CodeApprovalNotFound, "no such approval"), "approval_not_found"},
		{"an undeclared code", &idem.Error{Code: "SOMETHING_ELSE"}, ResultOther},
		{"cancelled", context.Canceled, ResultCancelled},
		{"deadline exceeded", fmt.Errorf("reserve: %w", context.DeadlineExceeded), ResultCancelled},
		{"fenced", idem.ErrFenced, ResultFenced},
		{"approval not consumable", idem.ErrApprovalNotConsumable, ResultApprovalNotConsumable},
		{"attempt exists", &idem.AttemptExistsError{}, ResultAttemptExists},
		{"plain error", errPlain, ResultOther},
	}
	for _, r := range results {
		for _, method := range storeMethods {
			t.Run(r.name+"/"+method.name, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				m := New(reg)
				fake := &fakeStore{err: r.err}
				s := m.Store(fake)
				ctx := context.WithValue(t.Context(), ctxKey{}, "passed through")

				got, err := method.call(ctx, s)

				if err != r.err {
					t.Errorf("error = %v, want %v unchanged", err, r.err)
				}
				if !reflect.DeepEqual(got, method.results) {
					t.Errorf("results = %#v, want %#v", got, method.results)
				}
				if len(fake.calls) != 1 {
					t.Fatalf("the store got %d calls, want 1", len(fake.calls))
				}
				c := fake.calls[0]
				if c.method != method.name {
					t.Errorf("the store got %s, want %s", c.method, method.name)
				}
				if !reflect.DeepEqual(c.args, method.args) {
					t.Errorf("the store got arguments %#v, want %#v", c.args, method.args)
				}
				if !method.noCtx && c.ctxValue != "passed through" {
					t.Errorf("the store's context lost the caller's values (got %v)", c.ctxValue)
				}

				if n := testutil.CollectAndCount(m.storeDuration, NameStoreSeconds); n != 1 {
					t.Errorf("%s has %d series, want 1", NameStoreSeconds, n)
				}
				labels := map[string]string{"method": method.label, "result": r.want}
				if n := sampleCount(t, reg, NameStoreSeconds, labels); n != 1 {
					t.Errorf("%s%v has %d samples, want 1", NameStoreSeconds, labels, n)
				}
			})
		}
	}
}

func TestStoreConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	s := m.Store(&fakeStore{err: idem.Errorf(idem.CodeNotFound, "none")})
	const goroutines, calls = 8, 100
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				_, _ = s.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: scope, Key: "k1"})
			}
		})
	}
	wg.Wait()
	labels := map[string]string{"method": "get_attempt", "result": ResultNotFound}
	if n := sampleCount(t, reg, NameStoreSeconds, labels); n != goroutines*calls {
		t.Errorf("%s%v has %d samples, want %d", NameStoreSeconds, labels, n, goroutines*calls)
	}
}

// TestStoreConformance runs the store conformance suite on SQLite stores
// wrapped by Metrics.Store: the wrapper changes no behaviour.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		path := filepath.Join(t.TempDir(), "idem.db")
		reg := prometheus.NewRegistry()
		m := New(reg)
		t.Cleanup(func() {
			if n := testutil.CollectAndCount(m.storeDuration); n == 0 && !t.Skipped() { // a skipped case opens no store
				t.Errorf("%s recorded nothing", NameStoreSeconds)
			}
		})
		return storetest.Harness{
			Open: func(t *testing.T, clock idem.Clock) idem.Store {
				inner, err := sqlitestore.Open(t.Context(), path, idem.StoreConfig{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				s := m.Store(inner)
				t.Cleanup(func() { s.Close() })
				return s
			},
			Break: func(t *testing.T) { sqlitetest.Destroy(t, path) },
			CheckFence: func(t *testing.T, f idem.Fence, margin time.Duration) error {
				db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				tx, err := db.BeginTx(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := sqlitestore.CheckFence(t.Context(), tx, f, margin); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			Effect:  sqlitetest.Effect,
			Effects: func(t *testing.T) []string { return sqlitetest.Effects(t, path) },
		}
	})
}

// fakeTransactor is a fakeStore that also runs transactional executions.
type fakeTransactor struct{ fakeStore }

func (f *fakeTransactor) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return idem.TransactResult{Reserved: true, Committed: true, Attempt: fakeAttempt}, f.record(ctx, "Transact", p)
}

// TestStoreTransactorOnlyWhenInner checks that the wrapper is an
// idem.Transactor exactly when the store it wraps is one (the runner refuses
// transactional operations otherwise), and that Transact is observed.
func TestStoreTransactorOnlyWhenInner(t *testing.T) {
	m := New(prometheus.NewRegistry())
	if _, ok := m.Store(&fakeStore{}).(idem.Transactor); ok {
		t.Error("the wrapper of a store without Transact is an idem.Transactor")
	}

	reg := prometheus.NewRegistry()
	m = New(reg)
	fake := &fakeTransactor{fakeStore{err: idem.ErrKeyBusy}}
	tx, ok := m.Store(fake).(idem.Transactor)
	if !ok {
		t.Fatal("the wrapper of a Transactor is not an idem.Transactor")
	}
	p := idem.ReserveParams{StartParams: start, Key: "k1"}
	res, err := tx.Transact(t.Context(), p, nil)
	if err != idem.ErrKeyBusy || !res.Committed || !reflect.DeepEqual(res.Attempt, fakeAttempt) {
		t.Errorf("Transact = %+v, %v; want the inner result and error unchanged", res, err)
	}
	if len(fake.calls) != 1 || fake.calls[0].method != "Transact" || !reflect.DeepEqual(fake.calls[0].args, []any{p}) {
		t.Errorf("the store got %+v, want one Transact with %+v", fake.calls, p)
	}
	labels := map[string]string{"method": "transact", "result": ResultKeyBusy}
	if n := sampleCount(t, reg, NameStoreSeconds, labels); n != 1 {
		t.Errorf("%s%v has %d samples, want 1", NameStoreSeconds, labels, n)
	}
}
