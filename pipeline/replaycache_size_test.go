package pipeline

import (
	"github.com/idem-run/idem"

	"fmt"
	"hash/maphash"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// benchRecord is a completed record shaped like the harness's
// business.create: its stored envelope, its Location header, a key of the
// harness's form.
func benchRecord(i int, now time.Time) idem.Attempt {
	slug := fmt.Sprintf("f-%d-%d", i%16, i)
	exe := newID("exe_", now)
	body := fmt.Appendf(nil, `{"data":{"slug":%q,"name":"bench","createdBy":"agent-demo","createdAt":"2026-12-05T01:26:29.123456Z"},"meta":{"operation":"business.create","executionId":%q,"attempts":1,"idempotency":{"key":"bench-%s","replayed":false}}}`, slug, exe, slug)
	return idem.Attempt{
		Scope: idem.Scope{Org: "demo", Principal: "agent-demo"}, Key: "bench-" + slug, Operation: "business.create",
		Fingerprint: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", FingerprintVersion: 2,
		State: idem.AttemptCompleted, ExecutionID: exe, Status: 201,
		Headers: http.Header{"Location": {"/v1/businesses/" + slug}}, Body: body, Attempts: 1,
		CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(24 * time.Hour), ObservedAt: now,
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The cache's byte bound is a bound on the heap it holds: what it counts
// for a record is at least what the record costs (replayed once, so with its
// rendering kept), and not much more, or the bound wastes the memory an
// operator gives it (issue 36).
func TestReplayCacheCountsItsHeap(t *testing.T) {
	const n = 20000
	now := time.Now()
	before := heapInUse()
	c := newReplayCache(1 << 30)
	for i := range n {
		a := benchRecord(i, now)
		c.put(a, now)
		res, err := idem.ReplayResult(a.Status, a.Headers, a.Body, a.Key)
		if err != nil {
			t.Fatal(err)
		}
		c.keepReplay(a.Scope, a.Key, a.ExecutionID, res)
	}
	held := heapInUse() - before
	runtime.KeepAlive(c)
	perRecord, counted := float64(held)/n, float64(c.bytes)/n
	t.Logf("figures: replay cache, a business.create record replayed once: %.0f bytes of heap, %.0f counted", perRecord, counted)
	if counted < perRecord {
		t.Errorf("the cache counts %.0f bytes a record, less than the %.0f it holds: its bound is not on the heap", counted, perRecord)
	}
	if counted > 1.25*perRecord {
		t.Errorf("the cache counts %.0f bytes a record, more than 1.25× the %.0f it holds", counted, perRecord)
	}
}

// A ghost (a key the cache remembers without its record) costs the heap
// the cache counts for it, ghostBytes.
func TestReplayCacheCountsItsGhosts(t *testing.T) {
	const n = 40000
	keys := make([]cacheKey, n)
	for i := range keys {
		keys[i] = cacheKey{"demo", "agent-demo", fmt.Sprint("bench-f-", i)}
	}
	runtime.KeepAlive(keys)
	before := heapInUse()
	g := &ghosts{seed: maphash.MakeSeed(), max: n}
	for _, k := range keys {
		g.add(k)
	}
	held := heapInUse() - before
	runtime.KeepAlive(g)
	runtime.KeepAlive(keys) // held before and after: not counted
	t.Logf("figures: replay cache, a ghost: %d bytes of heap, %d counted", held/n, ghostBytes)
	if held > n*ghostBytes {
		t.Errorf("a ghost holds %d bytes, more than the %d counted", held/n, ghostBytes)
	}
}
