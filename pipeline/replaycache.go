package pipeline

import (
	"github.com/idem-run/idem"

	"hash/maphash"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReplayCacheBytes is the replay cache's bound when
// Config.ReplayCacheBytes is 0.
const DefaultReplayCacheBytes = 16 << 20

// replayCacheMargin is how long before its retention ends a record stops
// being served from memory: the retention is the store's clock's, and this
// instance measures the time left only by its own elapsed time since the
// store read the record, which a round trip and the store's sampling of
// its clock blur by well under a second.
const replayCacheMargin = time.Minute

// replayCache answers replays without a store round trip. It holds only
// completed records without a secret: such a record never changes until its
// retention passes (SPEC §6.3), so a copy is exact on every instance for as
// long as it is retained. Secret results are left to the store, whose sweeper
// destroys them when their window passes. A record is dropped from memory
// replayCacheMargin before its retention ends by the store's clock (what it
// had left when the store read it, ExpiresAt − ObservedAt, counted down by
// this instance's elapsed time, never by its wall clock, which may be off;
// issue 28, item 4), and when the cache is over its byte bound, least
// recently used first. It keeps of a record what a replay answers (issue
// 36): once a replay is rendered, the rendering and not the stored body.
type replayCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	// head is the most recently used copy, head.prev the least.
	head  *cached
	byKey map[cacheKey]*cached
	gone  ghosts
	// hits and misses count the records answered from memory and those
	// read from the store (Runner.ReplayCacheStats).
	hits, misses atomic.Int64
}

// ghosts remembers, by a hash of their scope and key, the keys whose final
// record this instance knew and does not hold: evicted by the byte bound,
// or never cacheable (a secret result, an indeterminate record). A call
// with such a key is most likely a replay, and the runner reads its record
// (a read) instead of leaving stage 5 to the reservation (a write
// transaction in SQLite's single writer, two round trips on PostgreSQL).
// A hash that collides only costs that read. Two generations of max
// hashes each bound it: when the newer is full, the older is dropped.
type ghosts struct {
	seed     maphash.Seed
	cur, old map[uint64]struct{}
	max      int
}

// ghostBytes is what the cache counts for a ghost: a map slot of a hash,
// with the map's load factor and control bytes (measured with
// runtime.MemStats, TestReplayCacheCountsItsGhosts).
const ghostBytes = 32

func (g *ghosts) hash(k cacheKey) uint64 {
	var h maphash.Hash
	h.SetSeed(g.seed)
	h.WriteString(k.org)
	h.WriteByte(0)
	h.WriteString(k.principal)
	h.WriteByte(0)
	h.WriteString(k.key)
	return h.Sum64()
}

func (g *ghosts) add(k cacheKey) {
	if g.max == 0 {
		return
	}
	if g.cur == nil || len(g.cur) >= g.max {
		g.old, g.cur = g.cur, map[uint64]struct{}{}
	}
	g.cur[g.hash(k)] = struct{}{}
}

func (g *ghosts) has(k cacheKey) bool {
	if g.max == 0 {
		return false
	}
	h := g.hash(k)
	_, ok := g.cur[h]
	if !ok {
		_, ok = g.old[h]
	}
	return ok
}

// newReplayCache returns a cache bounded to maxBytes; nil (no caching) when
// maxBytes is negative.
func newReplayCache(maxBytes int) *replayCache {
	if maxBytes < 0 {
		return nil
	}
	if maxBytes == 0 {
		maxBytes = DefaultReplayCacheBytes
	}
	// A sixteenth of the bound remembers the keys the rest cannot hold.
	ghostShare := maxBytes / 16
	return &replayCache{maxBytes: maxBytes - ghostShare, byKey: map[cacheKey]*cached{},
		gone: ghosts{seed: maphash.MakeSeed(), max: ghostShare / ghostBytes / 2}}
}

type cacheKey struct{ org, principal, key string }

// cached is the copy of a completed record: what a replay of it needs.
type cached struct {
	k          cacheKey
	prev, next *cached // the recency ring
	operation  string
	// fingerprint and version judge the intent (sameIntent).
	fingerprint, executionID string
	version, status          int
	attempts                 int
	// headers are the record's, as name, value pairs: a map per copy
	// would cost more than the rest of a small record (get makes one).
	headers []string
	// body is the stored answer, until replay is kept.
	body []byte
	// replay is the record's success answer marked as a replay (its
	// rendering, data and meta), made by the first replay served from this
	// copy; Status and Header are the record's.
	replay *idem.Result
	// until is when the copy stops being served, by this instance's clock
	// (whose readings the runtime subtracts monotonically): put now plus
	// what the record had left by the store's clock when the store read it
	// (ExpiresAt − ObservedAt), less replayCacheMargin.
	until time.Time
	size  int
}

// attempt is the record as the runner reads it: Body is nil once the
// rendered replay is kept (get returns it beside).
func (v *cached) attempt() idem.Attempt {
	var h http.Header
	if len(v.headers) > 0 {
		h = make(http.Header, len(v.headers)/2)
		for i := 0; i < len(v.headers); i += 2 {
			h[v.headers[i]] = append(h[v.headers[i]], v.headers[i+1])
		}
	}
	return idem.Attempt{Scope: idem.Scope{Org: v.k.org, Principal: v.k.principal}, Key: v.k.key, Operation: v.operation,
		Fingerprint: v.fingerprint, FingerprintVersion: v.version, State: idem.AttemptCompleted, ExecutionID: v.executionID,
		Status: v.status, Headers: h, Body: v.body, Attempts: v.attempts}
}

// flatHeaders is h as name, value pairs.
func flatHeaders(h http.Header) []string {
	n := 0
	for _, vs := range h {
		n += 2 * len(vs)
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for name, vs := range h {
		for _, v := range vs {
			out = append(out, name, v)
		}
	}
	return out
}

// What the cache counts for a copy besides its strings and bodies: the
// entry and its map slot, and a kept replay's Result and meta, measured with runtime.MemStats (TestReplayCacheCountsItsHeap), so
// that the bound is on real heap, not on bodies.
const (
	entryBytes  = 270
	replayBytes = 200
)

func keyOf(scope idem.Scope, key string) cacheKey { return cacheKey{scope.Org, scope.Principal, key} }

// cacheable reports whether a may be served from memory at now.
func cacheable(a idem.Attempt) bool {
	return a.State == idem.AttemptCompleted && a.SealedKeyID == "" && !a.ObservedAt.IsZero() &&
		a.ExpiresAt.Sub(a.ObservedAt) > replayCacheMargin
}

// get returns the cached record of (scope, key), if it may still be
// served, and its rendered replay once kept (keepReplay), nil before.
func (c *replayCache) get(scope idem.Scope, key string, now time.Time) (idem.Attempt, *idem.Result, bool) {
	if c == nil {
		return idem.Attempt{}, nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.byKey[keyOf(scope, key)]
	if !ok {
		return idem.Attempt{}, nil, false
	}
	if !now.Before(v.until) {
		c.remove(v)
		return idem.Attempt{}, nil, false
	}
	c.toFront(v)
	c.hits.Add(1)
	return v.attempt(), v.replay, true
}

// known reports whether (scope, key) had a final record this instance
// knew and does not hold (ghosts).
func (c *replayCache) known(scope idem.Scope, key string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone.has(keyOf(scope, key))
}

// missed counts a record read from the store.
func (c *replayCache) missed() {
	if c != nil {
		c.misses.Add(1)
	}
}

// keepReplay keeps res as the marked replay of the cached copy of (scope,
// key), if that copy is the record of executionID, in place of its stored
// body.
func (c *replayCache) keepReplay(scope idem.Scope, key, executionID string, res idem.Result) {
	if c == nil {
		return
	}
	res.Status, res.Header = 0, nil
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.byKey[keyOf(scope, key)]
	if !ok || v.executionID != executionID || v.replay != nil {
		return
	}
	// The meta's strings are the copy's own when equal: one of each.
	if m := res.Meta; m != nil {
		if m.ExecutionID == v.executionID {
			m.ExecutionID = v.executionID
		}
		if m.Operation == v.operation {
			m.Operation = v.operation
		}
		if m.Idempotency != nil && m.Idempotency.Key == v.k.key {
			m.Idempotency.Key = v.k.key
		}
	}
	size := res.Footprint() + replayBytes - len(v.body)
	v.replay, v.body = &res, nil
	v.size += size
	c.bytes += size
	c.evict()
}

// put keeps a if it may be served from memory, and remembers its key
// (ghosts) if it is final and may not.
func (c *replayCache) put(a idem.Attempt, now time.Time) {
	if c == nil || a.State == idem.AttemptInFlight {
		return
	}
	k := keyOf(a.Scope, a.Key)
	if !cacheable(a) {
		c.forget(k)
		return
	}
	size := len(a.Body) + len(k.org) + len(k.principal) + len(k.key) + len(a.Operation) + len(a.Fingerprint) + len(a.ExecutionID) + entryBytes
	headers := flatHeaders(a.Headers)
	size += 16 * len(headers)
	for _, h := range headers {
		size += len(h)
	}
	if size > c.maxBytes/16 {
		c.forget(k) // one record must not flush the cache
		return
	}
	v := &cached{k: k, operation: a.Operation, fingerprint: a.Fingerprint, executionID: a.ExecutionID,
		version: a.FingerprintVersion, status: a.Status, attempts: a.Attempts, headers: headers, body: a.Body,
		until: now.Add(a.ExpiresAt.Sub(a.ObservedAt) - replayCacheMargin), size: size}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byKey[k]; ok {
		c.remove(old)
	}
	c.byKey[k] = v
	c.toFront(v)
	c.bytes += size
	c.evict()
}

// evict drops the least recently used copies while the cache is over its
// bound, remembering their keys.
func (c *replayCache) evict() {
	for c.bytes > c.maxBytes && c.head != nil {
		v := c.head.prev
		c.gone.add(v.k)
		c.remove(v)
	}
}

// forget drops k's copy, if any, and remembers k as a ghost.
func (c *replayCache) forget(k cacheKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.byKey[k]; ok {
		c.remove(v)
	}
	c.gone.add(k)
}

// toFront makes v, held or new, the most recently used copy.
func (c *replayCache) toFront(v *cached) {
	if c.head == v {
		return
	}
	if v.next != nil { // held: unlink
		v.prev.next, v.next.prev = v.next, v.prev
	}
	if c.head == nil {
		v.prev, v.next = v, v
	} else {
		v.prev, v.next = c.head.prev, c.head
		c.head.prev.next, c.head.prev = v, v
	}
	c.head = v
}

func (c *replayCache) remove(v *cached) {
	delete(c.byKey, v.k)
	c.bytes -= v.size
	if v.next == v {
		c.head = nil
	} else {
		v.prev.next, v.next.prev = v.next, v.prev
		if c.head == v {
			c.head = v.next
		}
	}
	v.prev, v.next = nil, nil
}
