// Package metrics exports idem's Prometheus metrics (SPEC §13): executions
// by operation and outcome, replays, in-flight conflicts, indeterminate
// results, runtime retries, and store latency.
//
// Wire it in three places:
//
//	m := metrics.New(reg)
//	runner, err := pipeline.New(registry, pipeline.Config{
//		Store:   m.Store(store),
//		Observe: m.Observe,
//	})
//	metrics.RegisterAuditDropped(reg, runner)
//
// Labels are bounded: operation comes from declared operation names, code
// from idem's codes and the operations' declared errors, method and result
// from fixed lists. Nothing is labelled by principal, org or key.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// Metric names: part of the operator contract, they never change.
const (
	NameExecutions       = "idem_executions_total"
	NameReplays          = "idem_replays_total"
	NameInFlightConflict = "idem_in_flight_conflicts_total"
	NameIndeterminate    = "idem_indeterminate_total"
	NameRuntimeRetries   = "idem_runtime_retries_total"
	NameExecutionSeconds = "idem_execution_duration_seconds"
	NameStoreSeconds     = "idem_store_duration_seconds"
	NameRateLimited      = "idem_rate_limited_total"
)

// Values of the outcome label of idem_executions_total.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeReplayed  = "replayed"
)

// storeBuckets are the buckets of idem_store_duration_seconds: store calls
// are one transaction each, from sub-millisecond (SQLite) to seconds (a
// struggling PostgreSQL).
var storeBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// Metrics holds idem's Prometheus collectors.
type Metrics struct {
	executions    *prometheus.CounterVec
	replays       *prometheus.CounterVec
	inFlight      *prometheus.CounterVec
	indeterminate *prometheus.CounterVec
	retries       *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	storeDuration *prometheus.HistogramVec
	rateLimited   *prometheus.CounterVec
}

// New creates the collectors and registers them with reg
// (prometheus.NewRegistry() in tests; the server passes its own registry).
// It panics if reg already holds collectors of the same names, as
// prometheus.MustRegister does: a set-up mistake.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameExecutions,
			Help: "Calls that ran or were answered, by operation, outcome (succeeded: status < 400, failed, replayed) and code (empty on success).",
		}, []string{"operation", "outcome", "code"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameReplays,
			Help: "Calls answered with the stored result of an earlier execution (same key, same request).",
		}, []string{"operation"}),
		inFlight: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameInFlightConflict,
			Help: "Calls answered IDEMPOTENCY_KEY_IN_FLIGHT: their key's original request was still running.",
		}, []string{"operation"}),
		indeterminate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameIndeterminate,
			Help: "Answers that report indeterminacy (IDEMPOTENCY_RESULT_INDETERMINATE) or create it (a keyed execution that ended with status >= 500 or CANCELLED).",
		}, []string{"operation"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRuntimeRetries,
			Help: "Handler attempts beyond the first, run by runtime retries inside one execution.",
		}, []string{"operation"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameExecutionSeconds,
			Help:    "Time from receiving a call to its final answer, in seconds.",
			Buckets: prometheus.DefBuckets,
		}, []string{"operation"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameStoreSeconds,
			Help:    "Latency of store calls, by method and result (ok, not_found, unavailable, cancelled, fenced, approval_not_consumable, another code in lower case, or other).",
			Buckets: storeBuckets,
		}, []string{"method", "result"}),
	}
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRateLimited,
		Help: "Calls refused by a configured rate limit (SPEC §8.1), by operation and limit.",
	}, []string{"operation", "limit"})
	reg.MustRegister(m.executions, m.replays, m.inFlight, m.indeterminate, m.retries, m.duration, m.storeDuration, m.rateLimited)
	return m
}

// Observe records one finished call; pass it as pipeline.Config.Observe.
func (m *Metrics) Observe(r pipeline.Report) {
	op := r.Operation
	m.executions.WithLabelValues(op, outcome(r), string(r.Code)).Inc()
	m.duration.WithLabelValues(op).Observe(r.Duration.Seconds())

	// The per-operation counters are touched on every call, so that each
	// operation's series exist (at 0) from its first call and rate() sees
	// their first increase.
	replays := m.replays.WithLabelValues(op)
	inFlight := m.inFlight.WithLabelValues(op)
	indeterminate := m.indeterminate.WithLabelValues(op)
	retries := m.retries.WithLabelValues(op)
	if r.Replayed {
		replays.Inc()
	}
	if r.Code == idem.CodeIdempotencyKeyInFlight {
		inFlight.Inc()
	}
	if r.Limit != "" {
		m.rateLimited.WithLabelValues(op, r.Limit).Inc()
	}
	if isIndeterminate(r) {
		indeterminate.Inc()
	}
	if r.Attempts > 1 {
		retries.Add(float64(r.Attempts - 1))
	}
}

// outcome is the outcome label of r.
func outcome(r pipeline.Report) string {
	switch {
	case r.Replayed:
		return OutcomeReplayed
	case r.Status < http.StatusBadRequest:
		return OutcomeSucceeded
	}
	return OutcomeFailed
}

// isIndeterminate reports whether r reports indeterminacy or created it.
//
// A keyed execution that ends with status >= 500 or CANCELLED leaves its
// record indeterminate (SPEC §6.3, Store.Complete). A replay never does:
// it answers from a completed record. A 5xx that ran no handler attempt
// reserved nothing (STORE_UNAVAILABLE at the lookup or the reservation, or
// a stored result that could not be read) and made no record
// indeterminate, so it is not counted. CANCELLED is counted whatever its
// attempts: a call cancelled after its reservation but before its handler
// started has run none, yet its record is indeterminate (the rarer
// cancellation noticed at the first lookup, before any reservation, is
// counted too: a Report cannot tell the two apart).
func isIndeterminate(r pipeline.Report) bool {
	switch {
	case r.Code == idem.CodeIdempotencyResultIndeterminate:
		return true
	case !r.Keyed || r.Replayed:
		return false
	case r.Code == idem.CodeCancelled:
		return true
	}
	return r.Status >= http.StatusInternalServerError && r.Attempts > 0
}
