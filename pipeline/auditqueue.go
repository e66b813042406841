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

// auditQueue writes the audit of reads and replays off the request's
// path: a replay is answered from the record (or from memory) and its
// execution.replayed event follows; a fresh read is answered and its
// execution, started and finished, follows (readAudit); each batched with
// the others queued meanwhile. Runner.Flush (and every read of an
// execution through the Runner) waits for the queue, so a caller reading
// its execution after a replay or a read sees it. What a crash loses is
// what is queued: at most maxQueuedEvents replay events and fresh reads,
// never a write's record (docs/runtime.md).
type auditQueue struct {
	store idem.Store
	log   *slog.Logger

	mu      sync.Mutex
	pending []orgEvent
	idle    chan struct{} // closed when the queue is empty and nothing is being written
}

// orgEvent is one queued item: an event of an execution of org, or (read
// set) a fresh read's whole execution.
type orgEvent struct {
	org  string
	ev   idem.AuditEvent
	read *idem.FinishedExecution
}

func newAuditQueue(store idem.Store, log *slog.Logger) *auditQueue {
	idle := make(chan struct{})
	close(idle)
	return &auditQueue{store: store, log: log, idle: idle}
}

// add queues ev for an execution of org.
func (q *auditQueue) add(org string, ev idem.AuditEvent) {
	q.enqueue(orgEvent{org: org, ev: ev})
}

// addExecution queues a fresh read's execution, which the store has not
// started: it is recorded whole (Store.RecordExecutions).
func (q *auditQueue) addExecution(x idem.FinishedExecution) {
	q.enqueue(orgEvent{org: x.Start.Scope.Org, read: &x})
}

// enqueue queues e, or writes it at once when the queue is full.
func (q *auditQueue) enqueue(e orgEvent) {
	q.mu.Lock()
	if len(q.pending) >= maxQueuedEvents {
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), finalizeTimeout)
		defer cancel()
		q.write(ctx, []orgEvent{e})
		return
	}
	q.pending = append(q.pending, e)
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

// write records the reads (one store call per maxRecorded), then appends
// the events, one store call per org.
func (q *auditQueue) write(ctx context.Context, batch []orgEvent) {
	byOrg := map[string][]idem.AuditEvent{}
	var orgs []string
	var reads []idem.FinishedExecution
	for _, e := range batch {
		if e.read != nil {
			reads = append(reads, *e.read)
			continue
		}
		if _, ok := byOrg[e.org]; !ok {
			orgs = append(orgs, e.org)
		}
		byOrg[e.org] = append(byOrg[e.org], e.ev)
	}
	q.writeReads(ctx, reads)
	for _, org := range orgs {
		if err := q.store.AppendEvents(ctx, idem.AppendEventsParams{Org: org, Events: byOrg[org]}); err != nil {
			q.log.Warn("audit replay events", "org", org, "events", len(byOrg[org]), "error", err)
		}
	}
}

// maxRecorded is how many fresh reads one RecordExecutions call records.
const maxRecorded = 500

// writeReads records fresh reads' executions, maxRecorded a statement.
func (q *auditQueue) writeReads(ctx context.Context, reads []idem.FinishedExecution) {
	for len(reads) > 0 {
		n := min(len(reads), maxRecorded)
		if err := q.store.RecordExecutions(ctx, idem.RecordExecutionsParams{Executions: reads[:n]}); err != nil {
			q.log.Warn("audit reads", "executions", n, "error", err)
		}
		reads = reads[n:]
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
