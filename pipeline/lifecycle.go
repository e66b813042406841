package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// The Runner's background work, owned by Start and Stop:
//
//   - the sweeper (Store.Sweep every SweepInterval, jittered ± half): it
//     forgets records past their retention, destroys expired secrets,
//     marks passed leases indeterminate and undecided approvals expired,
//     and removes executions past AuditRetention;
//   - the completion feed (a CompletionFeed store's notifications of
//     completions by other instances, which wake this one's waiters at
//     once instead of at their next poll);
//   - the audit queue (replays' events, fresh reads' executions), which
//     Stop flushes.
//
// A Runner that is never started still answers every call correctly: its
// waiters poll, and nothing is swept unless another process sweeps.

// sweepBatch is how many rows one step of a sweep touches.
const sweepBatch = 500

// lifecycle is the state of Start and Stop.
type lifecycle struct {
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// ErrRunnerStarted is Start's error on a runner already started (or
// stopped: a runner starts once).
var ErrRunnerStarted = errors.New("pipeline: the runner was already started")

// Start starts the runner's background work: the sweeper (unless
// Config.SweepInterval is negative) and the completion feed. It
// returns at once; the work runs until Stop, or until ctx ends. The
// first sweep runs at once.
func (r *Runner) Start(ctx context.Context) error {
	lc := &r.life
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.started {
		return ErrRunnerStarted
	}
	lc.started = true
	ctx, lc.cancel = context.WithCancel(ctx)
	if feed, ok := r.cfg.Store.(idem.CompletionFeed); ok {
		if keys := feed.Completions(ctx); keys != nil {
			lc.wg.Go(func() {
				for k := range keys { // closed when ctx ends or the store closes
					r.done.finished(k.Scope, k.Key)
				}
			})
		}
	}
	if r.cfg.SweepInterval > 0 {
		lc.wg.Go(func() { r.sweepLoop(ctx) })
	}
	return nil
}

// Stop ends the background work Start began, waits for it, and then
// waits until the audit events of replays answered so far are stored
// (Flush), or ctx ends (its error). Call it after the surfaces stopped
// taking calls. Stop on a runner never started only flushes.
func (r *Runner) Stop(ctx context.Context) error {
	lc := &r.life
	lc.mu.Lock()
	if lc.cancel != nil && !lc.stopped {
		lc.stopped = true
		lc.cancel()
	}
	lc.mu.Unlock()
	waited := make(chan struct{})
	go func() { lc.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.Flush(ctx)
}

// sweepLoop sweeps at once and then every SweepInterval (± half, so
// instances spread out) until ctx ends, each round running until nothing
// is left.
func (r *Runner) sweepLoop(ctx context.Context) {
	interval := r.cfg.SweepInterval
	for first := true; ; first = false {
		if !first {
			t := time.NewTimer(interval/2 + rand.N(interval))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		r.sweep(ctx)
		if ctx.Err() != nil {
			return
		}
	}
}

// sweep runs one round: Store.Sweep until a step finds less than a batch.
func (r *Runner) sweep(ctx context.Context) {
	log := r.cfg.Logger
	for {
		res, err := r.cfg.Store.Sweep(ctx, idem.SweepParams{BatchSize: sweepBatch, AuditRetention: max(r.cfg.AuditRetention, 0)})
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("sweep", "error", err)
			}
			return
		}
		if res != (idem.SweepResult{}) {
			log.Info("swept", "forgotten", res.Forgotten, "secretsDestroyed", res.SecretsDestroyed, "leasesExpired", res.LeasesExpired, "approvalsExpired", res.ApprovalsExpired,
				"executionsRemoved", res.ExecutionsRemoved, "eventsRemoved", res.EventsRemoved)
		}
		if res.Done(sweepBatch) {
			return
		}
	}
}
