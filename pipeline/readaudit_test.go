package pipeline_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// gatedStore holds every StartExecution until gate is closed.
type gatedStore struct {
	idem.Store
	gate chan struct{}
}

func (s *gatedStore) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return idem.Execution{}, ctx.Err()
	}
	return s.Store.StartExecution(ctx, p)
}

// A fresh read is answered before its execution is written: the audit
// queue records it, started and finished, after the answer, and a read of
// the execution through the runner (which flushes the queue) finds it
// whole. A write is not: its execution starts before its handler runs.
func TestFreshReadAuditLeavesTheRequestPath(t *testing.T) {
	gated := &gatedStore{gate: make(chan struct{})}
	f := newFixture(t, []idem.Operation{showOp()})
	gated.Store = f.store
	f = newFixtureOn(t, f.clock, gated, []idem.Operation{showOp()})

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// The request path may not wait for the gate: the call's own context
	// ends it after a second.
	cctx, ccancel := context.WithTimeout(ctx, time.Second)
	defer ccancel()
	res := f.do(cctx, call{op: "thing.show", path: map[string]string{"id": "t1"}})
	if res.Status != http.StatusOK {
		t.Fatalf("fresh read: %d %s", res.Status, res.Body())
	}
	id := decode(t, res).Meta.ExecutionID
	if id == "" {
		t.Fatal("the answer names no execution")
	}
	// Answered while its execution's start is still held in the queue.
	close(gated.gate)
	x, err := f.runner.GetExecution(ctx, agent, id)
	if err != nil {
		t.Fatalf("the read's execution after the queue: %v", err)
	}
	var types []string
	for _, ev := range x.Events {
		types = append(types, ev.Type)
	}
	if x.Outcome != idem.OutcomeSucceeded || len(types) != 2 || types[0] != idem.EventStarted || types[1] != idem.EventSucceeded {
		t.Fatalf("the read's execution = %+v, events %v; want succeeded with started and succeeded", x, types)
	}
}
