package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type cacheStats struct{ hits, misses int64 }

func (c *cacheStats) ReplayCacheStats() (int64, int64) { return c.hits, c.misses }

func TestReplayCacheIsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &cacheStats{}
	RegisterReplayCache(reg, s)
	s.hits, s.misses = 9, 2
	want := `# HELP idem_replay_cache_hits_total Final records of idempotency keys answered from the replay cache.
# TYPE idem_replay_cache_hits_total counter
idem_replay_cache_hits_total 9
# HELP idem_replay_cache_misses_total Final records of idempotency keys read from the store: not in the replay cache (evicted, never read here, or secret or indeterminate).
# TYPE idem_replay_cache_misses_total counter
idem_replay_cache_misses_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NameReplayCacheHits, NameReplayCacheMisses); err != nil {
		t.Fatal(err)
	}
}
