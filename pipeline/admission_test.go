package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// writeCounter counts the store writes that start an execution.
type writeCounter struct {
	idem.Store
	writes atomic.Int64
}

func (s *writeCounter) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	s.writes.Add(1)
	return s.Store.Reserve(ctx, p)
}

func (s *writeCounter) StartExecution(ctx context.Context, p idem.StartParams) (idem.Execution, error) {
	s.writes.Add(1)
	return s.Store.StartExecution(ctx, p)
}

// TestCallBeyondDecodeBudget: a surface that does not admit the body
// itself (MCP, the Go API) shares the decode budget: beyond it, Call
// answers 429 RATE_LIMITED with Retry-After, stores nothing and leaves the
// key unconsumed (SPEC §6.8).
func TestCallBeyondDecodeBudget(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, nil)
	store := &writeCounter{Store: f.store}
	reg, err := idem.NewRegistry(createOp(&runs), showOp())
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: store, Clock: f.clock, DecodeBudget: 1 << 10, AdmissionWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	held, err := r.AdmitBody(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AdmitBody(t.Context(), 10); idem.ErrorCode(err) != idem.CodeRateLimited {
		t.Fatalf("AdmitBody beyond the budget = %v, want RATE_LIMITED", err)
	}
	req := idem.Invocation{Operation: "thing.create", Principal: agent, Key: "k1", Intent: idem.Intent{Body: []byte(`{"name":"a"}`)}}
	resp := r.Call(t.Context(), req)
	if resp.Status != 429 || resp.Problem.Code != idem.CodeRateLimited || !resp.Problem.Retryable || resp.Problem.Code.RetryAfter() == 0 {
		t.Fatalf("Call beyond the budget = %d %s %v", resp.Status, resp.Body(), resp.Header)
	}
	if store.writes.Load() != 0 || runs.Load() != 0 {
		t.Fatalf("the refused call wrote %d times and ran %d", store.writes.Load(), runs.Load())
	}
	if _, err := r.GetAttempt(t.Context(), agent, "k1"); idem.ErrorCode(err) != idem.CodeNotFound {
		t.Fatalf("attempt of the refused key = %v, want not found", err)
	}
	held()
	if resp := r.Call(t.Context(), req); resp.Status != 201 || resp.Replayed || runs.Load() != 1 {
		t.Fatalf("the same key after release = %d %s", resp.Status, resp.Body())
	}
}

// TestExecutionBoundLeavesReplays: with every execution place taken, a
// new execution is refused before anything is stored, but a replay needs
// no place.
func TestExecutionBoundLeavesReplays(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, nil)
	store := &writeCounter{Store: f.store}
	// A handler that holds the only place until released.
	started, release := make(chan struct{}), make(chan struct{})
	holder := idem.Define(idem.Metadata{Name: "thing.hold", Method: "POST", Path: "/v1/hold", Summary: "Hold", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryConvergent, Reconcile: "thing.show"}},
		func(ctx context.Context, call *idem.Call, in struct{}) (struct{}, error) {
			close(started)
			<-release
			return struct{}{}, nil
		})
	reg, err := idem.NewRegistry(createOp(&runs), showOp(), holder)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: store, Clock: f.clock, MaxExecutions: 1, AdmissionWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	done := idem.Invocation{Operation: "thing.create", Principal: agent, Key: "k-done", Intent: idem.Intent{Body: []byte(`{"name":"done"}`)}}
	if resp := r.Call(t.Context(), done); resp.Status != 201 {
		t.Fatalf("first = %d %s", resp.Status, resp.Body())
	}
	held := make(chan idem.Result, 1)
	go func() {
		held <- r.Call(context.Background(), idem.Invocation{Operation: "thing.hold", Principal: agent})
	}()
	<-started
	writes := store.writes.Load()
	fresh := idem.Invocation{Operation: "thing.create", Principal: agent, Key: "k-new", Intent: idem.Intent{Body: []byte(`{"name":"b"}`)}}
	if resp := r.Call(t.Context(), fresh); resp.Status != 429 || resp.Problem.Code != idem.CodeRateLimited || resp.Problem.Code.RetryAfter() == 0 {
		t.Fatalf("execution beyond the bound = %d %s", resp.Status, resp.Body())
	}
	if store.writes.Load() != writes {
		t.Fatal("the refused execution wrote to the store")
	}
	if resp := r.Call(t.Context(), done); resp.Status != 201 || !resp.Replayed {
		t.Fatalf("replay with every place taken = %d %s", resp.Status, resp.Body())
	}
	close(release)
	if resp := <-held; resp.Status != 200 {
		t.Fatalf("holder = %d %s", resp.Status, resp.Body())
	}
	if resp := r.Call(t.Context(), fresh); resp.Status != 201 {
		t.Fatalf("the refused key once there is room = %d %s", resp.Status, resp.Body())
	}
}

// TestBodiesGrowingAtOnceDoNotWaitForEachOther: two bodies that each hold
// half the decode budget and need more both get it in turn: the first to
// find no room gives its part back and waits for all it needs, instead of
// waiting while holding, which would leave each waiting for the other
// until both were refused.
func TestBodiesGrowingAtOnceDoNotWaitForEachOther(t *testing.T) {
	f := newFixture(t, nil)
	reg, err := idem.NewRegistry(showOp())
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: f.store, Clock: f.clock, DecodeBudget: 4 << 10, AdmissionWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	charge := func() *pipeline.BodyCharge {
		c, err := r.ChargeBody(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Grow(2 << 10); err != nil || c.Held() != 2<<10 { // 1 KiB, then as much again
			t.Fatalf("grow to 2 KiB: held %d, %v", c.Held(), err)
		}
		return c
	}
	a, b := charge(), charge() // the budget is full
	const need = 3<<10 + 1
	grown := make(chan *pipeline.BodyCharge, 2)
	errs := make(chan error, 2)
	for _, c := range []*pipeline.BodyCharge{a, b} {
		go func() {
			if err := c.Grow(need); err != nil {
				errs <- err
				return
			}
			grown <- c
		}()
	}
	select {
	case first := <-grown:
		if first.Held() < need {
			t.Fatalf("the first body holds %d, want %d", first.Held(), need)
		}
		first.Release()
	case err := <-errs:
		t.Fatalf("a growing body was refused: %v", err)
	case <-time.After(4 * time.Second):
		t.Fatal("neither body grew: each waits for the other")
	}
	select {
	case second := <-grown:
		second.Release()
	case err := <-errs:
		t.Fatalf("the second body was refused: %v", err)
	case <-time.After(4 * time.Second):
		t.Fatal("the second body did not grow after the first was done")
	}
	if _, err := r.AdmitBody(t.Context(), 4<<10); err != nil {
		t.Fatalf("the budget was not given back whole: %v", err)
	}
}

func TestValueCount(t *testing.T) {
	for in, want := range map[string]int{
		``: 0, `1`: 1, `[]`: 1, `{}`: 1, `[1]`: 2, `[1,2,3]`: 4, `{"a":1}`: 2, `{"a":1,"b":[true,null]}`: 5,
		`["a,b",":","[x]"]`: 4, `{"k\"[,":"v\\"}`: 2, `[[],{},[[]]]`: 5,
	} {
		if got := pipeline.ValueCount([]byte(in)); got != want {
			t.Errorf("valueCount(%s) = %d, want %d", in, got, want)
		}
	}
}

// TestDenseBodyCountsItsValues: a body of many tiny values counts
// bytesPerValue a value against the decode budget, not its bytes (its
// decoding and its validation errors cost per value): with half the budget
// held elsewhere, such a body is refused RATE_LIMITED before it is decoded,
// while a body of the same bytes in few values runs; once the budget is
// free the dense body runs too (issue 28, item 12).
func TestDenseBodyCountsItsValues(t *testing.T) {
	f := newFixture(t, nil)
	var mu sync.Mutex
	var got []valuesIn
	reg, err := idem.NewRegistry(valuesOp(&mu, &got), showOp())
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: f.store, Clock: f.clock, DecodeBudget: 64 << 10, AdmissionWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	items := make([]string, 2000)
	for i := range items {
		items[i] = `{"q":1}`
	}
	dense := `{"items":[` + strings.Join(items, ",") + `]}` // 16 KB, 4,002 values: 64 KB
	sparse := `{"text":"` + strings.Repeat("n", len(dense)-12) + `"}`
	held, err := r.AdmitBody(t.Context(), 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	call := func(key, body string) idem.Result {
		return r.Call(t.Context(), idem.Invocation{Operation: "value.put", Principal: agent, Key: key,
			Intent: idem.Intent{PathParams: map[string]string{"id": "a"}, Body: []byte(body)}})
	}
	if res := call("k-dense", dense); res.Status != 429 || res.Problem.Code != idem.CodeRateLimited {
		t.Fatalf("a dense body with half the budget held: %d %.200s", res.Status, res.Body())
	}
	if res := call("k-sparse", sparse); res.Status != 200 {
		t.Fatalf("a body of the same bytes in few values was refused: %.200s", res.Body())
	}
	held()
	if res := call("k-dense", dense); res.Status != 200 {
		t.Fatalf("the dense body with the budget free: %d %.200s", res.Status, res.Body())
	}
}
