package pipeline

import (
	"github.com/idem-run/idem"

	"container/list"
	"hash/maphash"
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
// recently used first.
type replayCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    *list.List // of *cached, most recent first
	byKey    map[cacheKey]*list.Element
	gone     ghosts
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
// runtime.MemStats, TestReplayCacheCountsItsHeap).
const ghostBytes = 24

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

type cacheKey struct{ org, principal, key string }

type cached struct {
	k    cacheKey
	a    idem.Attempt
	size int
	// until is when the copy stops being served, by this instance's clock
	// (whose readings the runtime subtracts monotonically): put now plus
	// what the record had left by the store's clock when the store read it
	// (ExpiresAt − ObservedAt), less replayCacheMargin.
	until time.Time
	// replay is the record's success answer marked as a replay (its
	// rendering, data and meta), made by the first replay served from this
	// copy; Status and Header are the record's.
	replay *idem.Result
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
	return &replayCache{maxBytes: maxBytes - ghostShare, order: list.New(), byKey: map[cacheKey]*list.Element{},
		gone: ghosts{seed: maphash.MakeSeed(), max: ghostShare / ghostBytes / 2}}
}

func keyOf(scope idem.Scope, key string) cacheKey { return cacheKey{scope.Org, scope.Principal, key} }

// cacheable reports whether a may be served from memory at now.
func cacheable(a idem.Attempt) bool {
	return a.State == idem.AttemptCompleted && a.SealedKeyID == "" && !a.ObservedAt.IsZero() &&
		a.ExpiresAt.Sub(a.ObservedAt) > replayCacheMargin
}

// get returns the cached record of (scope, key), if it may still be served.
func (c *replayCache) get(scope idem.Scope, key string, now time.Time) (idem.Attempt, bool) {
	if c == nil {
		return idem.Attempt{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[keyOf(scope, key)]
	if !ok {
		return idem.Attempt{}, false
	}
	v := e.Value.(*cached)
	if !now.Before(v.until) {
		c.remove(e)
		return idem.Attempt{}, false
	}
	c.order.MoveToFront(e)
	c.hits.Add(1)
	return v.a, true
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

// replayOf returns the marked replay kept for (scope, key) if the cached
// copy is still the record of executionID.
func (c *replayCache) replayOf(scope idem.Scope, key, executionID string) (idem.Result, bool) {
	if c == nil {
		return idem.Result{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[keyOf(scope, key)]; ok {
		if v := e.Value.(*cached); v.a.ExecutionID == executionID && v.replay != nil {
			return *v.replay, true
		}
	}
	return idem.Result{}, false
}

// keepReplay keeps res as the marked replay of the cached copy of (scope,
// key), if that copy is the record of executionID.
func (c *replayCache) keepReplay(scope idem.Scope, key, executionID string, res idem.Result) {
	if c == nil {
		return
	}
	size := res.Footprint()
	res.Status, res.Header = 0, nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[keyOf(scope, key)]; ok {
		if v := e.Value.(*cached); v.a.ExecutionID == executionID && v.replay == nil {
			v.replay = &res
			v.size += size
			c.bytes += size
		}
	}
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
	// The fixed part is what a record costs in memory besides its strings
	// (the Attempt, the header map, the list and map entries), measured
	// with runtime.MemStats: the bound is on real heap, not on bodies.
	size := len(a.Body) + len(k.org) + len(k.principal) + len(k.key) + len(a.Operation) + len(a.Fingerprint) + len(a.ExecutionID) + 1024
	for name, vs := range a.Headers {
		size += len(name)
		for _, v := range vs {
			size += len(v)
		}
	}
	if size > c.maxBytes/16 {
		c.forget(k) // one record must not flush the cache
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		c.remove(e)
	}
	c.byKey[k] = c.order.PushFront(&cached{k: k, a: a, size: size, until: now.Add(a.ExpiresAt.Sub(a.ObservedAt) - replayCacheMargin)})
	c.bytes += size
	for c.bytes > c.maxBytes {
		e := c.order.Back()
		c.gone.add(e.Value.(*cached).k)
		c.remove(e)
	}
}

// forget drops k's copy, if any, and remembers k as a ghost.
func (c *replayCache) forget(k cacheKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		c.remove(e)
	}
	c.gone.add(k)
}

func (c *replayCache) remove(e *list.Element) {
	v := c.order.Remove(e).(*cached)
	delete(c.byKey, v.k)
	c.bytes -= v.size
}
