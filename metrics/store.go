package metrics

import (
	"context"
	"errors"
	"strings"
	"time"

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
// reserve, get_attempt, ...) and result: idem.ObserveStore with StoreHook.
// Arguments, results and errors pass through untouched; the wrapper is an
// idem.Transactor when s is one (its transact method's latency includes
// the handler's, which runs inside the transaction).
func (m *Metrics) Store(s idem.Store) idem.Store { return idem.ObserveStore(s, m.StoreHook()) }

// StoreHook is the hook that observes store calls in
// idem_store_duration_seconds, for pipeline.Config.StoreHook (the runner
// then wraps its store once, for its spans and these latencies) or Store.
func (m *Metrics) StoreHook() idem.StoreHook {
	return idem.TimeStore(func(method string, took time.Duration, err error) {
		m.storeDuration.WithLabelValues(method, storeResult(err)).Observe(took.Seconds())
	})
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
