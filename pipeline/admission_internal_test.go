package pipeline

import (
	"context"
	"testing"
	"time"
)

// TestBudgetWaitsForRoom: with a wait, a take beyond the budget waits,
// first come first served, and gets its room once it is given back; a
// waiter whose caller gives up gets nothing; releases count once.
func TestBudgetWaitsForRoom(t *testing.T) {
	b := newBudget(4)
	held := b.take(t.Context(), 3, 0)
	if held == nil {
		t.Fatal("an empty budget refused")
	}
	if b.take(t.Context(), 2, 0) != nil {
		t.Fatal("a take beyond the budget fit without waiting")
	}
	got := make(chan func(), 1)
	go func() { got <- b.take(t.Context(), 2, time.Hour) }()
	for i := 0; b.waiting.Load() == 0; i++ {
		if i > 10000 {
			t.Fatal("the take never waited")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-got:
		t.Fatal("the waiter got room while the budget was full")
	default:
	}
	held()
	held() // given back once only
	release := <-got
	if release == nil {
		t.Fatal("the waiter got nothing once room was given back")
	}
	if b.take(t.Context(), 3, 0) != nil {
		t.Fatal("a release counted twice")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if b.take(ctx, 3, time.Hour) != nil {
		t.Fatal("a waiter whose caller gave up got room")
	}
	release()
	// A take larger than the whole budget fits an empty one.
	if big := b.take(t.Context(), 100, 0); big == nil {
		t.Fatal("a large take did not fit the empty budget")
	} else {
		big()
	}
	if unbounded := newBudget(0); unbounded.take(t.Context(), 1<<40, 0) == nil {
		t.Fatal("an unbounded budget refused")
	}
}
