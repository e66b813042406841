package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// maxQueuedEvents bounds the audit queue, items waiting for a retry
// included; past it, callers write their event themselves (backpressure
// instead of loss).
const maxQueuedEvents = 10_000

// Retries of the audit queue (issue 33 item 9): an item whose write failed
// for the store's availability (STORE_UNAVAILABLE, a deadline) is written
// again with the next batch, after a pause that doubles from auditBackoff
// up to auditMaxBackoff, auditAttempts times in all (about 18 s of outage
// at the defaults); then, or at once for any other failure, it is dropped
// and counted (Runner.AuditDropped, idem_audit_dropped_total).
const (
	auditAttempts   = 8
	auditBackoff    = 250 * time.Millisecond
	auditMaxBackoff = 5 * time.Second
)

// auditQueue writes the audit of reads and replays off the request's
// path: a replay is answered from the record (or from memory) and its
// execution.replayed event follows; a fresh read is answered and its
// execution, started and finished, follows (readAudit); each batched with
// the others queued meanwhile. Runner.Flush (and every read of an
// execution through the Runner) waits for the queue, so a caller reading
// its execution after a replay or a read sees it. What a crash loses is
// what is queued: at most maxQueuedEvents replay events and fresh reads,
// never a write's record (docs/runtime.md). A write that fails while the
// store is unavailable is retried, bounded (auditAttempts); what the queue
// finally gives up is counted in dropped.
type auditQueue struct {
	store idem.Store
	log   *slog.Logger
	// backoff is the first pause after a failed write (auditBackoff;
	// tests shorten it).
	backoff time.Duration
	// limit bounds pending (maxQueuedEvents; tests lower it).
	limit   int
	dropped atomic.Int64

	mu      sync.Mutex
	pending []orgEvent
	idle    chan struct{} // closed when the queue is empty and nothing is being written
}

// orgEvent is one queued item: an event of an execution of org, or (read
// set) a fresh read's whole execution; tries counts its failed writes.
type orgEvent struct {
	org   string
	ev    idem.AuditEvent
	read  *idem.FinishedExecution
	tries int
}

func newAuditQueue(store idem.Store, log *slog.Logger) *auditQueue {
	idle := make(chan struct{})
	close(idle)
	return &auditQueue{store: store, log: log, idle: idle, backoff: auditBackoff, limit: maxQueuedEvents}
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
	if len(q.pending) >= q.limit {
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), finalizeTimeout)
		defer cancel()
		q.drop(q.write(ctx, []orgEvent{e})) // no room to hold it for a retry
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

// drain writes until the queue is empty. Items whose write failed for the
// store's availability go back to the front of the queue, and the next
// write waits, longer after each failure in a row.
func (q *auditQueue) drain() {
	var pause time.Duration
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
		failed := q.write(ctx, batch)
		cancel()
		if len(failed) == 0 {
			pause = 0
			continue
		}
		q.retry(failed)
		pause = min(max(2*pause, q.backoff), auditMaxBackoff)
		time.Sleep(pause)
	}
}

// retry puts failed items back at the front of the queue, those with
// attempts left and as many as the queue has room for; it drops the rest.
func (q *auditQueue) retry(failed []orgEvent) {
	again := failed[:0]
	var spent []orgEvent
	for _, e := range failed {
		if e.tries++; e.tries < auditAttempts {
			again = append(again, e)
		} else {
			spent = append(spent, e)
		}
	}
	q.mu.Lock()
	room := max(0, q.limit-len(q.pending))
	if len(again) > room {
		spent = append(spent, again[room:]...)
		again = again[:room]
	}
	q.pending = append(again, q.pending...)
	q.mu.Unlock()
	q.drop(spent)
}

// drop gives items up, counting them.
func (q *auditQueue) drop(items []orgEvent) {
	if len(items) == 0 {
		return
	}
	q.dropped.Add(int64(len(items)))
	q.log.Error("audit items dropped", "items", len(items), "dropped", q.dropped.Load())
}

// write records the reads (one store call per maxRecorded), then appends
// the events, one store call per org. It returns the items whose write
// failed for the store's availability (to retry) and drops those that
// failed otherwise (the store refused them: retrying would fail alike).
func (q *auditQueue) write(ctx context.Context, batch []orgEvent) (failed []orgEvent) {
	byOrg := map[string][]orgEvent{}
	var orgs []string
	var reads []orgEvent
	for _, e := range batch {
		if e.read != nil {
			reads = append(reads, e)
			continue
		}
		if _, ok := byOrg[e.org]; !ok {
			orgs = append(orgs, e.org)
		}
		byOrg[e.org] = append(byOrg[e.org], e)
	}
	for len(reads) > 0 {
		n := min(len(reads), maxRecorded)
		executions := make([]idem.FinishedExecution, n)
		for i, e := range reads[:n] {
			executions[i] = *e.read
		}
		err := q.store.RecordExecutions(ctx, idem.RecordExecutionsParams{Executions: executions})
		failed = q.failed(failed, reads[:n], err, "audit reads")
		reads = reads[n:]
	}
	for _, org := range orgs {
		items := byOrg[org]
		events := make([]idem.AuditEvent, len(items))
		for i, e := range items {
			events[i] = e.ev
		}
		err := q.store.AppendEvents(ctx, idem.AppendEventsParams{Org: org, Events: events})
		failed = q.failed(failed, items, err, "audit replay events")
	}
	return failed
}

// failed adds items to failed when err says the store was unavailable,
// drops them for any other error, and logs it.
func (q *auditQueue) failed(failed, items []orgEvent, err error, what string) []orgEvent {
	switch {
	case err == nil:
		return failed
	case errors.Is(err, idem.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded):
		q.log.Warn(what+": will retry", "items", len(items), "error", err)
		return append(failed, items...)
	}
	q.log.Warn(what, "items", len(items), "error", err)
	q.drop(items)
	return failed
}

// maxRecorded is how many fresh reads one RecordExecutions call records.
const maxRecorded = 500

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
