package pipeline

import (
	"log/slog"
	"testing"

	"github.com/idem-run/idem"
)

// Items to retry go back to the front of the queue while they have
// attempts left and the queue has room; the rest are dropped and counted,
// so the queue never holds more than its limit (issue 33 item 9).
func TestAuditRetryIsBounded(t *testing.T) {
	q := newAuditQueue(nil, slog.New(slog.DiscardHandler))
	q.limit = 3
	newer := []orgEvent{{org: "acme", ev: idem.AuditEvent{ExecutionID: "exe_new1"}}, {org: "acme", ev: idem.AuditEvent{ExecutionID: "exe_new2"}}}
	q.pending = append([]orgEvent(nil), newer...)
	failed := []orgEvent{
		{org: "acme", ev: idem.AuditEvent{ExecutionID: "exe_spent"}, tries: auditAttempts - 1},
		{org: "acme", ev: idem.AuditEvent{ExecutionID: "exe_a"}},
		{org: "acme", ev: idem.AuditEvent{ExecutionID: "exe_b"}, tries: 2},
		{org: "acme", ev: idem.AuditEvent{ExecutionID: "exe_c"}},
	}
	q.retry(failed)
	var got []string
	for _, e := range q.pending {
		got = append(got, e.ev.ExecutionID)
	}
	if len(got) != 3 || got[0] != "exe_a" || got[1] != "exe_new1" || got[2] != "exe_new2" || q.pending[0].tries != 1 {
		t.Fatalf("queue after the retry = %v (first tried %d times); want [exe_a exe_new1 exe_new2], exe_a tried once", got, q.pending[0].tries)
	}
	if n := q.dropped.Load(); n != 3 {
		t.Fatalf("dropped %d, want 3 (one out of attempts, two without room)", n)
	}
}
