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
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: NameWriteTransactions,
			Help: "Write transactions the store ran (group commit: each may carry the writes of several calls).",
		}, func() float64 { t, _ := s.WriteStats(); return float64(t) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: NameWriteCalls,
			Help: "Store write calls run in those transactions; calls ÷ transactions is the mean batch size.",
		}, func() float64 { _, c := s.WriteStats(); return float64(c) }),
	)
}
