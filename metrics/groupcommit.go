package metrics

import "github.com/prometheus/client_golang/prometheus"

// Names of the group-commit counters (both stores batch their writes).
const (
	NameWriteTransactions = "idem_store_write_transactions_total"
	NameWriteCalls        = "idem_store_write_calls_total"
)

// WriteStatser is a store that batches writes (group commit) and counts
// them; sqlitestore and pgstore are.
type WriteStatser interface {
	// WriteStats returns the write transactions run and the store calls
	// they carried.
	WriteStats() (transactions, calls int64)
}

// RegisterWriteStats exports s's group-commit counters; their ratio is the
// mean batch size.
func RegisterWriteStats(reg prometheus.Registerer, s WriteStatser) {
	registerPair(reg, s.WriteStats,
		prometheus.CounterOpts{Name: NameWriteTransactions,
			Help: "Write transactions the store ran (group commit: each may carry the writes of several calls)."},
		prometheus.CounterOpts{Name: NameWriteCalls,
			Help: "Store write calls run in those transactions; calls ÷ transactions is the mean batch size."})
}

// registerPair exports the two counts stats returns as two counters,
// named and described by first and second.
func registerPair(reg prometheus.Registerer, stats func() (int64, int64), first, second prometheus.CounterOpts) {
	reg.MustRegister(
		prometheus.NewCounterFunc(first, func() float64 { a, _ := stats(); return float64(a) }),
		prometheus.NewCounterFunc(second, func() float64 { _, b := stats(); return float64(b) }),
	)
}
