// Package groupcommit batches concurrent write transactions into shared
// ones, so that one commit (one fsync on SQLite, one WAL flush on
// PostgreSQL) serves many callers.
//
// A Committer has a queue and a few workers. Each worker takes whatever is
// queued (up to a batch size) and runs it as one transaction: the callers'
// functions one after another, then one commit. While a batch commits, new
// calls queue behind it, so batches grow with load and a lone caller pays
// nothing extra: batching needs no timer.
//
// A Batcher is the same queue for one kind of write: callers queue their
// parameters instead of functions, and one set function writes a whole
// batch's (one set-based statement, where a Committer's transaction runs a
// statement per caller). Its guarantees are the same.
//
// Guarantees, the same as one transaction per call:
//   - Do returns nil only once the caller's writes are committed.
//   - A caller's writes commit together or not at all, and never partly.
//   - When one function of a batch fails, its failure never becomes another
//     caller's (a fenced completion, an approval that is no longer
//     consumable): with Config.Isolate each function runs under a savepoint
//     and only the failed one is rolled back, the others commit; without
//     it the batch is rolled back and every function runs again alone, in
//     its own transaction.
//   - When the transaction itself fails (begin or commit: the database is
//     unreachable, locked or full), every caller of the batch gets that
//     error: nothing of theirs was written.
package groupcommit

import (
	"context"
	"errors"
	"time"
)

// ErrClosed is returned by Do once the Committer is closed.
var ErrClosed = errors.New("groupcommit: committer closed")

// Fn is one caller's part of a transaction. It must start from scratch on
// every call (it runs again alone when its batch fails) and use the ctx it
// is given, which is not the caller's while it runs in a batch.
type Fn[T any] func(ctx context.Context, tx T) error

// RunTx runs fn in one transaction and commits if fn returns nil. It is the
// store's own transaction runner (begin, retry on serialization failures,
// commit).
type RunTx[T any] func(ctx context.Context, fn Fn[T]) error

// Config shapes a Committer.
type Config struct {
	// Workers is how many batches may run at once (1 for a single-writer
	// database).
	Workers int
	// MaxBatch caps the callers of one transaction.
	MaxBatch int
	// Timeout bounds a shared transaction, which runs detached from its
	// callers' cancellations.
	Timeout time.Duration
	// After, if set, runs on a worker after each of its transactions, once
	// every caller of it has been answered, with the number of calls then
	// waiting for a worker: the place for upkeep of the database that must
	// not delay a commit (sqlitestore's WAL checkpoint), best done when
	// queued is 0. The worker takes no new batch until it returns.
	After func(queued int)
}

// Isolate runs one caller's function of a shared transaction under a
// savepoint: fnErr is the function's own error, after which its writes are
// rolled back to the savepoint and the transaction goes on; err is a
// failure of the savepoint itself, which fails the batch.
type Isolate[T any] func(ctx context.Context, tx T, fn func() error) (fnErr, err error)

// Committer batches calls of Do.
type Committer[T any] struct {
	workers[Fn[T], struct{}]
	run     RunTx[T]
	isolate Isolate[T] // nil: a failed function reruns its batch alone
}

// New starts a Committer whose transactions run through run.
func New[T any](run RunTx[T], cfg Config) *Committer[T] {
	return start(run, nil, cfg)
}

func start[T any](run RunTx[T], isolate Isolate[T], cfg Config) *Committer[T] {
	c := &Committer[T]{run: run, isolate: isolate}
	c.workers.start(cfg, c.runBatch)
	return c
}

// NewIsolated starts a Committer whose shared transactions run each
// caller's function under a savepoint (isolate): a function runs exactly
// once, and is never repeated because a neighbour failed.
func NewIsolated[T any](run RunTx[T], isolate Isolate[T], cfg Config) *Committer[T] {
	return start(run, isolate, cfg)
}

// Do runs fn in a transaction, shared with other callers' when several
// are waiting, and returns once it is committed or has failed. If ctx ends
// before a worker takes fn, fn never runs and ctx's error comes back; once
// taken, fn runs detached from ctx's cancellation (bounded by
// Config.Timeout) and Do waits for the outcome.
func (c *Committer[T]) Do(ctx context.Context, fn Fn[T]) error {
	_, err := c.do(ctx, fn)
	return err
}

type call[T any] = pending[Fn[T], struct{}]

func (c *Committer[T]) runBatch(live []*call[T]) {
	if len(live) == 1 {
		c.alone(live[0])
		return
	}
	c.count(len(live))
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	if c.isolate != nil {
		c.runIsolated(ctx, live)
		return
	}
	fnFailed := false
	err := c.run(ctx, func(ctx context.Context, tx T) error {
		fnFailed = false // run may retry the whole transaction
		for _, k := range live {
			if err := k.v(ctx, tx); err != nil {
				fnFailed = true
				return err
			}
		}
		return nil
	})
	if err != nil && fnFailed {
		// Somebody's function failed: everybody again, alone.
		for _, k := range live {
			c.alone(k)
		}
		return
	}
	for _, k := range live {
		k.answer(struct{}{}, err)
	}
}

// runIsolated runs a batch with a savepoint per call: a call whose
// function failed gets its own error, the others the transaction's.
func (c *Committer[T]) runIsolated(ctx context.Context, live []*call[T]) {
	fnErrs := make([]error, len(live))
	err := c.run(ctx, func(ctx context.Context, tx T) error {
		clear(fnErrs) // run may retry the whole transaction
		for i, k := range live {
			fnErr, err := c.isolate(ctx, tx, func() error { return k.v(ctx, tx) })
			if err != nil {
				return err
			}
			fnErrs[i] = fnErr
		}
		return nil
	})
	for i, k := range live {
		if err == nil && fnErrs[i] != nil {
			k.answer(struct{}{}, fnErrs[i])
			continue
		}
		k.answer(struct{}{}, err)
	}
}

// alone runs one taken call in its own transaction. Like a batch, it runs
// detached from the caller's cancellation (bounded by Timeout).
func (c *Committer[T]) alone(k *call[T]) {
	c.count(1)
	ctx, cancel := c.detached(k.ctx)
	defer cancel()
	k.answer(struct{}{}, c.run(ctx, k.v))
}
