package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// db is a toy database: a transaction buffers writes, a commit publishes
// them. commitErr makes every commit fail; gate, when set, holds each
// transaction until it is closed.
type db struct {
	mu        sync.Mutex
	committed []string
	txs       int
	commitErr error
	gate      chan struct{}
}

type tx struct{ writes []string }

func (d *db) run(ctx context.Context, fn Fn[*tx]) error {
	t := &tx{}
	if err := fn(ctx, t); err != nil {
		return err
	}
	if d.gate != nil {
		<-d.gate
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.txs++
	if d.commitErr != nil {
		return d.commitErr
	}
	d.committed = append(d.committed, t.writes...)
	return nil
}

func write(s string) Fn[*tx] {
	return func(_ context.Context, t *tx) error {
		t.writes = append(t.writes, s)
		return nil
	}
}

var errBoom = errors.New("boom")

// hold queues calls behind a first one that blocks the only worker, so that
// the next batch is known to hold them all.
func hold(t *testing.T, d *db, c *Committer[*tx], names ...string) map[string]error {
	t.Helper()
	return holdFns(t, d, c, func(name string) Fn[*tx] { return write(name) }, names...)
}

func holdFns(t *testing.T, d *db, c *Committer[*tx], fnFor func(string) Fn[*tx], names ...string) map[string]error {
	t.Helper()
	d.gate = make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	do := func(name string) {
		defer wg.Done()
		err := c.Do(context.Background(), fnFor(name))
		mu.Lock()
		errs[name] = err
		mu.Unlock()
	}
	wg.Add(1)
	go do("first")
	waitFor(t, func() bool { return len(c.queue) == 0 && c.calls.Load() == 1 })
	for _, n := range names {
		wg.Add(1)
		go do(n)
	}
	waitFor(t, func() bool { return len(c.queue) == len(names) })
	close(d.gate)
	wg.Wait()
	return errs
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConcurrentCallsShareTransactions(t *testing.T) {
	d := &db{}
	c := New(d.run, Config{Workers: 1, MaxBatch: 64})
	defer c.Close()
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprint("w", i)
	}
	errs := hold(t, d, c, names...)
	for n, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if d.txs != 2 {
		t.Errorf("21 calls took %d transactions, want 2 (the first alone, then one batch of 20)", d.txs)
	}
	got := slices.Sorted(slices.Values(d.committed))
	want := slices.Sorted(slices.Values(append(names, "first")))
	if !slices.Equal(got, want) {
		t.Errorf("committed %v, want %v", got, want)
	}
	if b, n := c.Stats(); b != 2 || n != 21 {
		t.Errorf("Stats = %d batches, %d calls; want 2, 21", b, n)
	}
}

func TestOneFailingFunctionFailsOnlyItsCaller(t *testing.T) {
	d := &db{}
	c := New(d.run, Config{Workers: 1, MaxBatch: 64})
	defer c.Close()
	fnFor := func(name string) Fn[*tx] {
		if name == "bad" {
			return func(_ context.Context, t *tx) error {
				t.writes = append(t.writes, "partial") // rolled back with its transaction
				return errBoom
			}
		}
		return write(name)
	}
	errs := holdFns(t, d, c, fnFor, "a", "bad", "b")
	if !errors.Is(errs["bad"], errBoom) {
		t.Errorf("bad: err = %v, want boom", errs["bad"])
	}
	for _, n := range []string{"first", "a", "b"} {
		if errs[n] != nil {
			t.Errorf("%s: err = %v, want nil", n, errs[n])
		}
	}
	if slices.Contains(d.committed, "partial") {
		t.Error("the failing call's partial write was committed")
	}
	if got := slices.Sorted(slices.Values(d.committed)); !slices.Equal(got, []string{"a", "b", "first"}) {
		t.Errorf("committed %v, want [a b first]", got)
	}
}

func TestFailedCommitFailsTheWholeBatchWithoutRetry(t *testing.T) {
	d := &db{commitErr: errBoom}
	c := New(d.run, Config{Workers: 1, MaxBatch: 64})
	defer c.Close()
	errs := hold(t, d, c, "a", "b", "c")
	for n, err := range errs {
		if !errors.Is(err, errBoom) {
			t.Errorf("%s: err = %v, want boom", n, err)
		}
	}
	if d.txs != 2 {
		t.Errorf("%d commits tried, want 2 (no call runs again after its batch's commit failed)", d.txs)
	}
}

func TestCallerGivingUpBeforeItsTurnNeverRuns(t *testing.T) {
	d := &db{gate: make(chan struct{})}
	c := New(d.run, Config{Workers: 1, MaxBatch: 64})
	defer c.Close()
	firstDone := make(chan error)
	go func() { firstDone <- c.Do(context.Background(), write("first")) }()
	waitFor(t, func() bool { return c.calls.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error)
	go func() { gone <- c.Do(ctx, write("late")) }()
	waitFor(t, func() bool { return len(c.queue) == 1 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Errorf("abandoned call: err = %v, want context.Canceled", err)
	}
	close(d.gate)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	// The worker skips the abandoned call; a later call still runs.
	if err := c.Do(context.Background(), write("after")); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(d.committed, "late") {
		t.Error("a call abandoned before a worker took it was committed")
	}
}

func TestClosedCommitterRefusesCalls(t *testing.T) {
	d := &db{}
	c := New(d.run, Config{})
	if err := c.Do(context.Background(), write("x")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if err := c.Do(context.Background(), write("y")); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close: err = %v, want ErrClosed", err)
	}
}

func TestManyConcurrentCallersAllCommitOnce(t *testing.T) {
	d := &db{}
	c := New(d.run, Config{Workers: 3, MaxBatch: 16})
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() {
			if err := c.Do(context.Background(), write(fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(d.committed) != 500 || len(slices.Compact(slices.Sorted(slices.Values(d.committed)))) != 500 {
		t.Errorf("committed %d writes (%d distinct), want 500 once each", len(d.committed), len(slices.Compact(slices.Sorted(slices.Values(d.committed)))))
	}
}

// A call whose context has already ended never runs, however often it is
// tried and however busy the workers are (Do's selects pick among ready
// cases at random, and a worker could take the call before Do saw ctx end).
func TestEndedContextNeverRuns(t *testing.T) {
	c := New(func(ctx context.Context, fn Fn[int]) error { return fn(ctx, 0) }, Config{Workers: 4, MaxBatch: 8})
	defer c.Close()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				// Live calls keep the workers busy meanwhile.
				_ = c.Do(context.Background(), func(context.Context, int) error { return nil })
				err := c.Do(ended, func(context.Context, int) error { ran.Add(1); return nil })
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err %v, want context.Canceled", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d calls with an ended context ran", n)
	}
}

// savepoint is the toy database's Isolate: a failed function's writes are
// cut back to where they stood before it.
func savepoint(_ context.Context, t *tx, fn func() error) (error, error) {
	mark := len(t.writes)
	if err := fn(); err != nil {
		t.writes = t.writes[:mark]
		return err, nil
	}
	return nil, nil
}

func TestIsolatedFailureRollsBackOnlyItsCallAndRunsNothingTwice(t *testing.T) {
	d := &db{}
	c := NewIsolated(d.run, savepoint, Config{Workers: 1, MaxBatch: 64})
	defer c.Close()
	var runs sync.Map // name → *atomic.Int32
	fnFor := func(name string) Fn[*tx] {
		return func(_ context.Context, t *tx) error {
			n, _ := runs.LoadOrStore(name, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			t.writes = append(t.writes, name)
			if name == "bad" {
				return errBoom
			}
			return nil
		}
	}
	errs := holdFns(t, d, c, fnFor, "a", "bad", "b")
	if !errors.Is(errs["bad"], errBoom) {
		t.Errorf("bad: err = %v, want boom", errs["bad"])
	}
	for _, n := range []string{"first", "a", "b"} {
		if errs[n] != nil {
			t.Errorf("%s: err = %v, want nil", n, errs[n])
		}
	}
	if got := slices.Sorted(slices.Values(d.committed)); !slices.Equal(got, []string{"a", "b", "first"}) {
		t.Errorf("committed %v, want [a b first]", got)
	}
	runs.Range(func(name, n any) bool {
		if got := n.(*atomic.Int32).Load(); got != 1 {
			t.Errorf("%s ran %d times, want once", name, got)
		}
		return true
	})
	if d.txs != 2 {
		t.Errorf("%d transactions, want 2 (the first alone, then one batch): the failure must not split the batch", d.txs)
	}
}

// Config.After runs after each transaction, once its callers have their
// answers, with the number of calls waiting then; the worker takes the
// next batch only when it returns.
func TestAfterRunsOnceTheBatchIsAnswered(t *testing.T) {
	d := &db{}
	var mu sync.Mutex
	var queued []int
	answered := make(chan struct{}, 1)
	release := make(chan struct{})
	c := New(d.run, Config{Workers: 1, MaxBatch: 64, After: func(n int) {
		<-answered // the batch's caller was answered first
		mu.Lock()
		queued = append(queued, n)
		mu.Unlock()
		if len(queued) == 1 {
			<-release // hold the worker: the next calls queue
		}
	}})
	defer c.Close()
	if err := c.Do(t.Context(), write("first")); err != nil {
		t.Fatal(err)
	}
	answered <- struct{}{}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if err := c.Do(t.Context(), write(fmt.Sprint("w", i))); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool { return len(c.queue) == 3 })
	if d.txs != 1 {
		t.Fatalf("%d transactions while After held the worker, want 1", d.txs)
	}
	close(release)
	wg.Wait()
	answered <- struct{}{}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(queued) == 2 })
	if queued[1] != 0 || d.txs != 2 {
		t.Errorf("After saw %v waiting calls over %d transactions, want 0 the second time, over 2 (the first alone, then the three queued behind After)", queued, d.txs)
	}
}
