package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// workers is what Committer and Batcher share: callers' requests (V) wait in
// a channel, a few workers each take what is queued (up to MaxBatch) and
// hand the calls still wanted to serve, which runs them in one transaction
// and answers each (R and an error) exactly once.
type workers[V, R any] struct {
	cfg   Config
	queue chan *pending[V, R]
	serve func(live []*pending[V, R])

	mu     sync.RWMutex // held for reading while enqueueing; close takes it
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup

	batches, calls atomic.Int64
}

// A pending call moves from waiting to taken (a worker runs it) or
// abandoned (its caller gave up first); only a waiting call can be
// abandoned.
const (
	waiting int32 = iota
	taken
	abandoned
)

// pending is one caller's request and, once served, its answer.
type pending[V, R any] struct {
	ctx   context.Context
	v     V
	state atomic.Int32
	done  chan answer[R]
}

type answer[R any] struct {
	r   R
	err error
}

func (k *pending[V, R]) answer(r R, err error) { k.done <- answer[R]{r, err} }

// withDefaults fills cfg's unset fields.
func (cfg Config) withDefaults() Config {
	cfg.Workers = max(cfg.Workers, 1)
	cfg.MaxBatch = max(cfg.MaxBatch, 1)
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	return cfg
}

// start starts q's workers; serve runs each batch.
func (w *workers[V, R]) start(cfg Config, serve func([]*pending[V, R])) {
	w.cfg = cfg.withDefaults()
	w.serve = serve
	w.queue = make(chan *pending[V, R], w.cfg.MaxBatch*w.cfg.Workers)
	w.stop = make(chan struct{})
	for range w.cfg.Workers {
		w.wg.Go(w.work)
	}
}

// do queues v and waits for its answer. If ctx ends before a worker takes
// v, v is never served and ctx's error comes back; once taken, Do waits for
// the answer, whatever ctx does.
func (w *workers[V, R]) do(ctx context.Context, v V) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		// Ended already: select below picks among ready cases at random,
		// and a worker could take v before do sees ctx end.
		return zero, err
	}
	k := &pending[V, R]{ctx: ctx, v: v, done: make(chan answer[R], 1)}
	if err := w.enqueue(ctx, k); err != nil {
		return zero, err
	}
	select {
	case a := <-k.done:
		return a.r, a.err
	case <-ctx.Done():
		if k.state.CompareAndSwap(waiting, abandoned) {
			return zero, ctx.Err()
		}
		a := <-k.done
		return a.r, a.err
	}
}

func (w *workers[V, R]) enqueue(ctx context.Context, k *pending[V, R]) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	select {
	case w.queue <- k:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Queued reports how many calls wait for a worker.
func (w *workers[V, R]) Queued() int { return len(w.queue) }

// Stats reports how many transactions ran and how many calls they served.
func (w *workers[V, R]) Stats() (batches, calls int64) {
	return w.batches.Load(), w.calls.Load()
}

// Close stops the workers after their current batches; calls still queued
// get ErrClosed. It may be called more than once.
func (w *workers[V, R]) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	w.wg.Wait()
	var zero R
	for {
		select {
		case k := <-w.queue:
			if k.state.CompareAndSwap(waiting, taken) {
				k.answer(zero, ErrClosed)
			}
		default:
			return
		}
	}
}

func (w *workers[V, R]) work() {
	batch := make([]*pending[V, R], 0, w.cfg.MaxBatch)
	for {
		select {
		case k := <-w.queue:
			batch = append(batch[:0], k)
		case <-w.stop:
			return
		}
	fill:
		for len(batch) < w.cfg.MaxBatch {
			select {
			case k := <-w.queue:
				batch = append(batch, k)
			default:
				break fill
			}
		}
		if live := w.take(batch); len(live) > 0 {
			w.serve(live)
			if w.cfg.After != nil {
				w.cfg.After(len(w.queue))
			}
		}
		clear(batch)
	}
}

// take keeps the calls of batch whose callers still wait, marking them
// taken, in place.
func (w *workers[V, R]) take(batch []*pending[V, R]) []*pending[V, R] {
	live := batch[:0]
	for _, k := range batch {
		if k.state.CompareAndSwap(waiting, taken) {
			live = append(live, k)
		}
	}
	return live
}

func (w *workers[V, R]) count(calls int) {
	w.batches.Add(1)
	w.calls.Add(int64(calls))
}

// detached is the context a taken call runs in: not cancelled with its
// caller's (so that a commit is never cut off halfway and the caller always
// learns whether its writes landed), bounded by Timeout.
func (w *workers[V, R]) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Timeout)
}
