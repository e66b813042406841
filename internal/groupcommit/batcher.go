package groupcommit

import (
	"context"
	"fmt"
)

// SetFn writes the requests of a batch of calls (ps, in their order) in tx,
// as one set-based statement rather than one statement per call, and
// returns one result and one error per request. A request's own error
// (errs[i]: a fenced completion, say) means nothing of it was written, and
// the rest of the batch commits. An error of the batch (err) rolls the
// whole transaction back, and then every request runs again alone (ps of
// one), so that no caller ever gets a neighbour's failure; alone, err is
// the caller's. Like Fn, it must start from scratch on every call and use
// the ctx it is given.
type SetFn[T, P, R any] func(ctx context.Context, tx T, ps []P) (rs []R, errs []error, err error)

// Batcher batches calls of Do like a Committer, but hands the requests of
// a batch to one SetFn: where a Committer runs one function, and so one
// statement, per caller in the shared transaction, a Batcher's
// transaction runs as few statements as the SetFn needs for all of them
// (one plan and one executor start-up on the server instead of N). It
// suits a write that many callers make at once with different values,
// one row each. The guarantees are a Committer's.
type Batcher[T, P, R any] struct {
	workers[P, R]
	run RunTx[T]
	fn  SetFn[T, P, R]
}

// NewBatcher starts a Batcher whose transactions run through run and write
// through fn.
func NewBatcher[T, P, R any](run RunTx[T], fn SetFn[T, P, R], cfg Config) *Batcher[T, P, R] {
	b := &Batcher[T, P, R]{run: run, fn: fn}
	b.workers.start(cfg, b.serveBatch)
	return b
}

// Do writes p in a transaction, shared with other callers' requests when
// several are waiting, and returns its result once it is committed, or its
// error. Cancellation is as for Committer.Do: if ctx ends before a worker
// takes p, p is never written and ctx's error comes back; once taken, p is
// written detached from ctx's cancellation and Do waits for the outcome.
func (b *Batcher[T, P, R]) Do(ctx context.Context, p P) (R, error) {
	return b.do(ctx, p)
}

func (b *Batcher[T, P, R]) serveBatch(live []*pending[P, R]) {
	if len(live) == 1 {
		b.alone(live[0])
		return
	}
	b.count(len(live))
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeout)
	defer cancel()
	ps := make([]P, len(live))
	for i, k := range live {
		ps[i] = k.v
	}
	var rs []R
	var errs []error
	fnFailed := false
	err := b.run(ctx, func(ctx context.Context, tx T) error {
		var err error
		rs, errs, err = b.call(ctx, tx, ps) // run may retry: each try starts over
		fnFailed = err != nil
		return err
	})
	if err != nil && fnFailed {
		// The batch failed as a whole: everybody again, alone.
		for _, k := range live {
			b.alone(k)
		}
		return
	}
	var zero R
	for i, k := range live {
		if err != nil {
			k.answer(zero, err) // the transaction failed: nothing was written
			continue
		}
		k.answer(rs[i], errs[i])
	}
}

// alone writes one taken request in a transaction of its own, detached
// from its caller's cancellation (bounded by Timeout).
func (b *Batcher[T, P, R]) alone(k *pending[P, R]) {
	b.count(1)
	ctx, cancel := b.detached(k.ctx)
	defer cancel()
	var r R
	var own error
	err := b.run(ctx, func(ctx context.Context, tx T) error {
		rs, errs, err := b.call(ctx, tx, []P{k.v})
		if err == nil {
			r, own = rs[0], errs[0]
		}
		return err
	})
	if err != nil {
		var zero R
		k.answer(zero, err)
		return
	}
	k.answer(r, own)
}

// call runs fn and holds it to its contract of one result and one error
// per request.
func (b *Batcher[T, P, R]) call(ctx context.Context, tx T, ps []P) ([]R, []error, error) {
	rs, errs, err := b.fn(ctx, tx, ps)
	if err == nil && (len(rs) != len(ps) || len(errs) != len(ps)) {
		err = fmt.Errorf("groupcommit: %d results and %d errors for %d requests", len(rs), len(errs), len(ps))
	}
	return rs, errs, err
}
