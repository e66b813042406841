package storetest

import (
	"errors"
	"testing"
	"time"

	"idem"
)

func init() {
	register("LeaseLeftByStoreClock", testLeaseLeft)
}

func fenceOf(a idem.Attempt) idem.Fence {
	return idem.Fence{Scope: a.Scope, Key: a.Key, FencingToken: a.FencingToken}
}

// LeaseLeft counts down by the store's clock while the record is in
// flight under the token, and is ErrFenced for another token, a final
// record, or one made indeterminate.
func testLeaseLeft(t *testing.T, e *env) {
	s := e.s(t)
	res := mustReserve(t, s, reserveParams(scopeA, "key-1", fpOne))
	f := fenceOf(res.Attempt)
	if left, err := s.LeaseLeft(ctx(t), f); err != nil || left != lease {
		t.Fatalf("LeaseLeft at once = %s, %v; want %s", left, err, lease)
	}
	e.clock.Advance(10 * time.Second)
	if left, err := s.LeaseLeft(ctx(t), f); err != nil || left != lease-10*time.Second {
		t.Fatalf("LeaseLeft after 10 s = %s, %v; want %s", left, err, lease-10*time.Second)
	}
	e.clock.Advance(lease)
	if left, err := s.LeaseLeft(ctx(t), f); err != nil || left != 0 {
		t.Fatalf("LeaseLeft past the lease = %s, %v; want 0", left, err)
	}
	for name, other := range map[string]idem.Fence{
		"another token":     {Scope: f.Scope, Key: f.Key, FencingToken: f.FencingToken + 1},
		"another principal": {Scope: scopeB, Key: f.Key, FencingToken: f.FencingToken},
		"another key":       {Scope: f.Scope, Key: "key-2", FencingToken: f.FencingToken},
	} {
		if _, err := s.LeaseLeft(ctx(t), other); !errors.Is(err, idem.ErrFenced) {
			t.Errorf("LeaseLeft with %s: err = %v, want ErrFenced", name, err)
		}
	}

	done := mustReserve(t, s, reserveParams(scopeA, "key-done", fpOne))
	if _, err := s.Complete(ctx(t), completeParams(done.Attempt, 200, `{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LeaseLeft(ctx(t), fenceOf(done.Attempt)); !errors.Is(err, idem.ErrFenced) {
		t.Errorf("LeaseLeft of a completed record: err = %v, want ErrFenced", err)
	}
}
