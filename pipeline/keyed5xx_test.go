package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// failingOp is a keyed create whose handler fails as its name says:
// "store" (its own database call: STORE_UNAVAILABLE), "error" (a plain
// error: EXECUTION_FAILED), "internal" (an INTERNAL it builds), "slow" (it
// outlives its timeout: TIMEOUT).
func failingOp() idem.Operation {
	m := createMeta()
	m.Timeout = 50 * time.Millisecond
	return idem.Define(m, func(ctx context.Context, call *idem.Call, in createIn) (thing, error) {
		switch in.Name {
		case "store":
			return thing{}, idem.Unavailable("things", errors.New("connection reset by peer"))
		case "error":
			return thing{}, errors.New("exploded")
		case "internal":
			return thing{}, idem.Errorf(idem.CodeInternal, "the ledger disagrees with itself")
		case "slow":
			<-ctx.Done()
			return thing{}, ctx.Err()
		}
		return thing{ID: "t_" + in.Name, Name: in.Name}, nil
	})
}

func problemOf(t *testing.T, r idem.Result) idem.Problem {
	t.Helper()
	var p idem.Problem
	if err := json.Unmarshal(r.Body(), &p); err != nil {
		t.Fatalf("body %s: %v", r.Body(), err)
	}
	return p
}

// A keyed 5xx produced after the handler started says that the call may
// have executed and names the reconcile read: never "nothing was
// executed", whatever the handler's own error said.
func TestKeyed5xxAfterStartSaysTheCallMayHaveExecuted(t *testing.T) {
	f := newFixture(t, []idem.Operation{failingOp(), showOp()})
	for name, want := range map[string]idem.Code{
		"store": idem.CodeStoreUnavailable, "error": idem.CodeExecutionFailed, "internal": idem.CodeInternal, "slow": idem.CodeTimeout,
	} {
		t.Run(name, func(t *testing.T) {
			resp := f.do(t.Context(), call{op: "thing.create", body: map[string]string{"name": name}, key: "k-" + name})
			p := problemOf(t, resp)
			if p.Code != want || p.Status < 500 || p.Retryable || p.Details["reconcile"] != "thing.show" {
				t.Fatalf("keyed %s: %s", name, resp.Body())
			}
			if strings.Contains(p.Detail, "nothing was executed") || !strings.Contains(p.Detail, "may have executed") ||
				!strings.Contains(p.Detail, "run thing.show") || strings.Contains(p.Detail, "retry later") {
				t.Fatalf("keyed %s after start: detail %q must say the call may have executed and to run thing.show", name, p.Detail)
			}
		})
	}
	// Unkeyed, the handler's own store failure still claims nothing.
	resp := f.do(t.Context(), call{op: "thing.create", principal: browser, body: map[string]string{"name": "store"}})
	if p := problemOf(t, resp); p.Code != idem.CodeStoreUnavailable || strings.Contains(p.Detail, "nothing was executed") {
		t.Fatalf("unkeyed store failure after start: %s", resp.Body())
	}
}

// unreachableGets fails every attempt read and reservation, as a store
// that is down.
type unreachableGets struct{ idem.Store }

func (unreachableGets) GetAttempt(context.Context, idem.GetAttemptParams) (idem.Attempt, error) {
	return idem.Attempt{}, idem.Unavailable("get attempt", errors.New("connection refused"))
}

func (unreachableGets) Reserve(context.Context, idem.ReserveParams) (idem.ReserveResult, error) {
	return idem.ReserveResult{}, idem.Unavailable("reserve", errors.New("connection refused"))
}

// Before the handler starts, a store failure says that nothing ran.
func TestStoreUnavailableBeforeStartSaysNothingRan(t *testing.T) {
	f := newFixture(t, []idem.Operation{failingOp(), showOp()})
	f = newFixtureOn(t, f.clock, unreachableGets{f.store}, []idem.Operation{failingOp(), showOp()})
	resp := f.do(t.Context(), call{op: "thing.create", body: map[string]string{"name": "a"}, key: "k"})
	p := problemOf(t, resp)
	if p.Code != idem.CodeStoreUnavailable || !p.Retryable || !strings.Contains(p.Detail, "nothing was executed") {
		t.Fatalf("store failure before start: %s", resp.Body())
	}
}

// unreleasable fails every Release, as a store whose disk is full.
type unreleasable struct{ idem.Store }

func (unreleasable) Release(context.Context, idem.ReleaseParams) error {
	return idem.Unavailable("release", errors.New("database or disk is full"))
}

// A handler that certainly did nothing (NotDispatched) frees its key; when
// that release fails too, the key stays held, and the answer says so: not
// retryable, with the reconcile read (SPEC §6.4), the key named as held.
func TestNotDispatchedWhoseReleaseFailsHoldsTheKey(t *testing.T) {
	op := idem.Define(createMeta(), func(ctx context.Context, call *idem.Call, in createIn) (thing, error) {
		return thing{}, idem.NotDispatched(idem.Unavailable("things", errors.New("database or disk is full")))
	})
	f := newFixture(t, []idem.Operation{op, showOp()})
	f = newFixtureOn(t, f.clock, unreleasable{f.store}, []idem.Operation{op, showOp()})
	resp := f.do(t.Context(), call{op: "thing.create", body: map[string]string{"name": "a"}, key: "k-held"})
	p := problemOf(t, resp)
	if resp.Status != 503 || p.Code != idem.CodeStoreUnavailable || p.Retryable || p.Details["reconcile"] != "thing.show" {
		t.Fatalf("not dispatched, release failed: %s; want 503 STORE_UNAVAILABLE, not retryable, details.reconcile thing.show", resp.Body())
	}
	for _, want := range []string{`idempotency key "k-held"`, "held", "run thing.show"} {
		if !strings.Contains(p.Detail, want) {
			t.Errorf("detail %q does not say %q", p.Detail, want)
		}
	}
	a, err := f.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "k-held"})
	if err != nil || a.State != idem.AttemptInFlight {
		t.Fatalf("the record after a failed release: %+v, %v; want it held in flight", a, err)
	}
}
