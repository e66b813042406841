package metrics

import "github.com/prometheus/client_golang/prometheus"

// Names of the replay cache's counters (issue 36).
const (
	NameReplayCacheHits   = "idem_replay_cache_hits_total"
	NameReplayCacheMisses = "idem_replay_cache_misses_total"
)

// ReplayCacheStatser is a runner that counts its replay cache's hits and
// misses; *pipeline.Runner is.
type ReplayCacheStatser interface {
	ReplayCacheStats() (hits, misses int64)
}

// RegisterReplayCache exports r's replay cache counters: final records of
// keys answered from memory, and read from the store (a record the cache
// did not hold: evicted, never read by this instance, or one it may not
// hold, a secret or indeterminate result). hits ÷ (hits + misses) is the
// cache's hit ratio; a new key's first execution is neither.
func RegisterReplayCache(reg prometheus.Registerer, r ReplayCacheStatser) {
	registerPair(reg, r.ReplayCacheStats,
		prometheus.CounterOpts{Name: NameReplayCacheHits,
			Help: "Final records of idempotency keys answered from the replay cache."},
		prometheus.CounterOpts{Name: NameReplayCacheMisses,
			Help: "Final records of idempotency keys read from the store: not in the replay cache (evicted, never read here, or secret or indeterminate)."})
}
