package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"log/slog"
	"sync"
)

// maxQueuedEvents bounds the audit queue; past it, callers write their
// event themselves (backpressure instead of loss).
const maxQueuedEvents = 10_000

// auditQueue writes replay events off the request's path: a replay is
// answered from the record (or from memory) and its execution.replayed
// event follows, batched with the others queued meanwhile. Runner.Flush
// (and every read of an execution through the Runner) waits for the queue,
// so a caller reading its execution after a replay sees the event.
type auditQueue struct {
	store idem.Store
	log   *slog.Logger

	mu      sync.Mutex
	pending []orgEvent
	idle    chan struct{} // closed when the queue is empty and nothing is being written
}

type orgEvent struct {
	org string
	ev  idem.AuditEvent
}

func newAuditQueue(store idem.Store, log *slog.Logger) *auditQueue {
	idle := make(chan struct{})
	close(idle)
	return &auditQueue{store: store, log: log, idle: idle}
}

// add queues ev for an execution of org.
func (q *auditQueue) add(org string, ev idem.AuditEvent) {
	q.mu.Lock()
	if len(q.pending) >= maxQueuedEvents {
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), finalizeTimeout)
		defer cancel()
		q.write(ctx, []orgEvent{{org, ev}})
		return
	}
	q.pending = append(q.pending, orgEvent{org, ev})
	start := isClosed(q.idle) // no drain is running
	if start {
		q.idle = make(chan struct{})
	}
	q.mu.Unlock()
	if start {
		go q.drain()
	}
}

// drain writes until the queue is empty.
func (q *auditQueue) drain() {
	for {
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		if len(batch) == 0 {
			close(q.idle)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), finalizeTimeout)
		q.write(ctx, batch)
		cancel()
	}
}

// write appends the events, one store call per org.
func (q *auditQueue) write(ctx context.Context, batch []orgEvent) {
	byOrg := map[string][]idem.AuditEvent{}
	var orgs []string
	for _, e := range batch {
		if _, ok := byOrg[e.org]; !ok {
			orgs = append(orgs, e.org)
		}
		byOrg[e.org] = append(byOrg[e.org], e.ev)
	}
	for _, org := range orgs {
		if err := q.store.AppendEvents(ctx, idem.AppendEventsParams{Org: org, Events: byOrg[org]}); err != nil {
			q.log.Warn("audit replay events", "org", org, "events", len(byOrg[org]), "error", err)
		}
	}
}

// flush waits until every event queued so far is written (or ctx ends).
func (q *auditQueue) flush(ctx context.Context) error {
	q.mu.Lock()
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
