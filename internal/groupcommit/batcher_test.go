package groupcommit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

var errFenced = errors.New("fenced")

// setWriter is a set function on the toy database: it writes every
// request in one go and records the size of each call. A request named
// "fenced…" fails alone (nothing written); one named "bad" fails its
// whole batch.
type setWriter struct {
	mu    sync.Mutex
	sizes []int
}

func (w *setWriter) write(_ context.Context, t *tx, ps []string) ([]string, []error, error) {
	w.mu.Lock()
	w.sizes = append(w.sizes, len(ps))
	w.mu.Unlock()
	rs, errs := make([]string, len(ps)), make([]error, len(ps))
	for i, p := range ps {
		switch {
		case p == "bad":
			return nil, nil, errBoom
		case strings.HasPrefix(p, "fenced"):
			errs[i] = errFenced
		default:
			t.writes = append(t.writes, p)
			rs[i] = strings.ToUpper(p)
		}
	}
	return rs, errs, nil
}

// holdSet is hold for a Batcher: requests queue behind a first one that
// blocks the only worker, so the next batch holds them all.
func holdSet(t *testing.T, d *db, b *Batcher[*tx, string, string], names ...string) (map[string]string, map[string]error) {
	t.Helper()
	d.gate = make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	rs, errs := map[string]string{}, map[string]error{}
	do := func(name string) {
		defer wg.Done()
		r, err := b.Do(context.Background(), name)
		mu.Lock()
		rs[name], errs[name] = r, err
		mu.Unlock()
	}
	wg.Add(1)
	go do("first")
	waitFor(t, func() bool { return len(b.queue) == 0 && b.calls.Load() == 1 })
	for _, n := range names {
		wg.Add(1)
		go do(n)
	}
	waitFor(t, func() bool { return len(b.queue) == len(names) })
	close(d.gate)
	wg.Wait()
	return rs, errs
}

func TestBatcherWritesABatchInOneSetCall(t *testing.T) {
	d, w := &db{}, &setWriter{}
	b := NewBatcher(d.run, w.write, Config{Workers: 1, MaxBatch: 64})
	defer b.Close()
	rs, errs := holdSet(t, d, b, "a", "fenced-b", "c")
	for n, want := range map[string]string{"first": "FIRST", "a": "A", "c": "C"} {
		if errs[n] != nil || rs[n] != want {
			t.Errorf("%s: %q, %v; want %q", n, rs[n], errs[n], want)
		}
	}
	if !errors.Is(errs["fenced-b"], errFenced) {
		t.Errorf("fenced-b: err = %v, want its own error", errs["fenced-b"])
	}
	if !slices.Equal(w.sizes, []int{1, 3}) {
		t.Errorf("set calls of sizes %v, want [1 3] (the first alone, then one of the three)", w.sizes)
	}
	if got := slices.Sorted(slices.Values(d.committed)); !slices.Equal(got, []string{"a", "c", "first"}) {
		t.Errorf("committed %v, want [a c first]", got)
	}
	if n, calls := b.Stats(); n != 2 || calls != 4 {
		t.Errorf("Stats = %d batches, %d calls; want 2, 4", n, calls)
	}
}

func TestBatcherFailedSetCallRunsEachRequestAlone(t *testing.T) {
	d, w := &db{}, &setWriter{}
	b := NewBatcher(d.run, w.write, Config{Workers: 1, MaxBatch: 64})
	defer b.Close()
	_, errs := holdSet(t, d, b, "a", "bad", "fenced-c")
	if errs["a"] != nil || !errors.Is(errs["bad"], errBoom) || !errors.Is(errs["fenced-c"], errFenced) {
		t.Errorf("errors %v; want a nil, bad boom, fenced-c its own", errs)
	}
	if got := slices.Sorted(slices.Values(d.committed)); !slices.Equal(got, []string{"a", "first"}) {
		t.Errorf("committed %v, want [a first]", got)
	}
	// The first alone, the failed batch, then each of its three alone.
	if !slices.Equal(w.sizes, []int{1, 3, 1, 1, 1}) {
		t.Errorf("set calls of sizes %v, want [1 3 1 1 1]", w.sizes)
	}
}

func TestBatcherFailedCommitFailsEveryCaller(t *testing.T) {
	d, w := &db{commitErr: errBoom}, &setWriter{}
	b := NewBatcher(d.run, w.write, Config{Workers: 1, MaxBatch: 64})
	defer b.Close()
	_, errs := holdSet(t, d, b, "a", "fenced-b")
	for n, err := range errs {
		if !errors.Is(err, errBoom) {
			t.Errorf("%s: err = %v, want boom (the transaction failed)", n, err)
		}
	}
	if d.txs != 2 {
		t.Errorf("%d commits tried, want 2 (nothing runs again after its batch's commit failed)", d.txs)
	}
}

func TestBatcherHoldsTheSetFunctionToItsContract(t *testing.T) {
	d := &db{}
	short := func(context.Context, *tx, []string) ([]string, []error, error) { return nil, nil, nil }
	b := NewBatcher(d.run, short, Config{})
	defer b.Close()
	if _, err := b.Do(context.Background(), "a"); err == nil {
		t.Error("a set function returning no result for its request: no error")
	}
}

func TestClosedBatcherRefusesCalls(t *testing.T) {
	d, w := &db{}, &setWriter{}
	b := NewBatcher(d.run, w.write, Config{})
	b.Close()
	b.Close()
	if _, err := b.Do(context.Background(), "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("err = %v, want ErrClosed", err)
	}
}
