package metrics

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// counts is what one Report must move: the executions series it lands in
// and the per-operation counters.
type counts struct {
	outcome       string
	code          idem.Code
	replays       float64
	inFlight      float64
	indeterminate float64
	retries       float64
}

// codeBusinessExists is an application's declared business code (the
// reference application's): a label like any other.
const codeBusinessExists idem.Code = "BUSINESS_EXISTS"

func TestObserve(t *testing.T) {
	const op = "order.refund"
	tests := []struct {
		name   string
		report pipeline.Report
		want   counts
	}{
		{
			name:   "unkeyed success",
			report: pipeline.Report{Status: 200, Attempts: 1},
			want:   counts{outcome: OutcomeSucceeded},
		},
		{
			name:   "keyed success after runtime retries",
			report: pipeline.Report{Status: 201, Keyed: true, Attempts: 3},
			want:   counts{outcome: OutcomeSucceeded, retries: 2},
		},
		{
			name:   "dry run",
			report: pipeline.Report{Status: 200, DryRun: true, Attempts: 1},
			want:   counts{outcome: OutcomeSucceeded},
		},
		{
			name:   "status 399 is a success",
			report: pipeline.Report{Status: 399, Attempts: 1},
			want:   counts{outcome: OutcomeSucceeded},
		},
		{
			name:   "invalid input ran nothing",
			report: pipeline.Report{Status: 400, Code: idem.CodeInvalidInput, Keyed: true},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeInvalidInput},
		},
		{
			name:   "declared business error",
			report: pipeline.Report{Status: 409, Code: codeBusinessExists, Keyed: true, Attempts: 1},
			want:   counts{outcome: OutcomeFailed, code: codeBusinessExists},
		},
		{
			name:   "replay of a success",
			report: pipeline.Report{Status: 201, Keyed: true, Replayed: true},
			want:   counts{outcome: OutcomeReplayed, replays: 1},
		},
		{
			name:   "replay of a stored business error",
			report: pipeline.Report{Status: 409, Code: codeBusinessExists, Keyed: true, Replayed: true},
			want:   counts{outcome: OutcomeReplayed, code: codeBusinessExists, replays: 1},
		},
		{
			name:   "in-flight conflict",
			report: pipeline.Report{Status: 409, Code: idem.CodeIdempotencyKeyInFlight, Keyed: true},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeIdempotencyKeyInFlight, inFlight: 1},
		},
		{
			name:   "indeterminate answer",
			report: pipeline.Report{Status: 409, Code: idem.CodeIdempotencyResultIndeterminate, Keyed: true},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeIdempotencyResultIndeterminate, indeterminate: 1},
		},
		{
			name:   "keyed execution failed",
			report: pipeline.Report{Status: 500, Code: idem.CodeExecutionFailed, Keyed: true, Attempts: 1},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeExecutionFailed, indeterminate: 1},
		},
		{
			name:   "keyed timeout after runtime retries",
			report: pipeline.Report{Status: 504, Code: idem.CodeTimeout, Keyed: true, Attempts: 3},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeTimeout, indeterminate: 1, retries: 2},
		},
		{
			name:   "keyed store failure after the handler ran",
			report: pipeline.Report{Status: 503, Code: idem.CodeStoreUnavailable, Keyed: true, Attempts: 1},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeStoreUnavailable, indeterminate: 1},
		},
		{
			name:   "keyed cancelled while running",
			report: pipeline.Report{Status: 499, Code: idem.CodeCancelled, Keyed: true, Attempts: 1},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeCancelled, indeterminate: 1},
		},
		{
			name:   "keyed cancelled after reservation before the handler",
			report: pipeline.Report{Status: 499, Code: idem.CodeCancelled, Keyed: true},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeCancelled, indeterminate: 1},
		},
		{
			name:   "keyed store unavailable before reservation",
			report: pipeline.Report{Status: 503, Code: idem.CodeStoreUnavailable, Keyed: true},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeStoreUnavailable},
		},
		{
			name:   "keyed stored result unreadable",
			report: pipeline.Report{Status: 500, Code: idem.CodeInternal, Keyed: true},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeInternal},
		},
		{
			name:   "unkeyed execution failed after a retry",
			report: pipeline.Report{Status: 500, Code: idem.CodeExecutionFailed, Attempts: 2},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeExecutionFailed, retries: 1},
		},
		{
			name:   "unkeyed cancelled",
			report: pipeline.Report{Status: 499, Code: idem.CodeCancelled, Attempts: 1},
			want:   counts{outcome: OutcomeFailed, code: idem.CodeCancelled},
		},
		{
			name:   "policy denied",
			report: pipeline.Report{Status: 403, Code: idem.CodePolicyDenied, Keyed: true},
			want:   counts{outcome: OutcomeFailed, code: idem.CodePolicyDenied},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := New(reg)
			r := tt.report
			r.Operation, r.Duration = op, 30*time.Millisecond
			m.Observe(r)

			if n := testutil.CollectAndCount(m.executions); n != 1 {
				t.Fatalf("%s has %d series, want 1", NameExecutions, n)
			}
			if got := testutil.ToFloat64(m.executions.WithLabelValues(op, tt.want.outcome, string(tt.want.code))); got != 1 {
				t.Errorf("%s{outcome=%q,code=%q} = %v, want 1", NameExecutions, tt.want.outcome, tt.want.code, got)
			}
			for _, c := range []struct {
				name string
				vec  *prometheus.CounterVec
				want float64
			}{
				{NameReplays, m.replays, tt.want.replays},
				{NameInFlightConflict, m.inFlight, tt.want.inFlight},
				{NameIndeterminate, m.indeterminate, tt.want.indeterminate},
				{NameRuntimeRetries, m.retries, tt.want.retries},
			} {
				// Every per-operation counter has its series from the
				// operation's first call, at 0 when it did not move.
				if n := testutil.CollectAndCount(c.vec); n != 1 {
					t.Errorf("%s has %d series, want 1", c.name, n)
				}
				if got := testutil.ToFloat64(c.vec.WithLabelValues(op)); got != c.want {
					t.Errorf("%s = %v, want %v", c.name, got, c.want)
				}
			}
			if got := sampleCount(t, reg, NameExecutionSeconds, map[string]string{"operation": op}); got != 1 {
				t.Errorf("%s has %d samples, want 1", NameExecutionSeconds, got)
			}
			if got := sampleSum(t, reg, NameExecutionSeconds, map[string]string{"operation": op}); got != 0.03 {
				t.Errorf("%s sums %v s, want 0.03", NameExecutionSeconds, got)
			}
		})
	}
}

// TestExposition pins the operator contract: names, help, label names and
// values as a scraper sees them.
func TestExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	for _, r := range []pipeline.Report{
		{Operation: "business.create", Status: 201, Keyed: true, Attempts: 2},
		{Operation: "business.create", Status: 201, Keyed: true, Replayed: true},
		{Operation: "business.create", Status: 409, Code: idem.CodeIdempotencyKeyInFlight, Keyed: true},
		{Operation: "business.create", Status: 500, Code: idem.CodeExecutionFailed, Keyed: true, Attempts: 1},
		{Operation: "business.show", Status: 200, Attempts: 1},
		{Operation: "business.show", Status: 200, Attempts: 1},
	} {
		m.Observe(r)
	}
	want := `
# HELP idem_executions_total Calls that ran or were answered, by operation, outcome (succeeded: status < 400, failed, replayed) and code (empty on success).
# TYPE idem_executions_total counter
idem_executions_total{code="",operation="business.create",outcome="replayed"} 1
idem_executions_total{code="",operation="business.create",outcome="succeeded"} 1
idem_executions_total{code="EXECUTION_FAILED",operation="business.create",outcome="failed"} 1
idem_executions_total{code="IDEMPOTENCY_KEY_IN_FLIGHT",operation="business.create",outcome="failed"} 1
idem_executions_total{code="",operation="business.show",outcome="succeeded"} 2
# HELP idem_replays_total Calls answered with the stored result of an earlier execution (same key, same request).
# TYPE idem_replays_total counter
idem_replays_total{operation="business.create"} 1
idem_replays_total{operation="business.show"} 0
# HELP idem_in_flight_conflicts_total Calls answered IDEMPOTENCY_KEY_IN_FLIGHT: their key's original request was still running.
# TYPE idem_in_flight_conflicts_total counter
idem_in_flight_conflicts_total{operation="business.create"} 1
idem_in_flight_conflicts_total{operation="business.show"} 0
# HELP idem_indeterminate_total Answers that report indeterminacy (IDEMPOTENCY_RESULT_INDETERMINATE) or create it (a keyed execution that ended with status >= 500 or CANCELLED).
# TYPE idem_indeterminate_total counter
idem_indeterminate_total{operation="business.create"} 1
idem_indeterminate_total{operation="business.show"} 0
# HELP idem_runtime_retries_total Handler attempts beyond the first, run by runtime retries inside one execution.
# TYPE idem_runtime_retries_total counter
idem_runtime_retries_total{operation="business.create"} 1
idem_runtime_retries_total{operation="business.show"} 0
`
	names := []string{NameExecutions, NameReplays, NameInFlightConflict, NameIndeterminate, NameRuntimeRetries}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// TestHistogramBuckets checks both histograms' buckets: the default ones
// for executions, 0.5 ms to 2.5 s for the store.
func TestHistogramBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Observe(pipeline.Report{Operation: "business.show", Status: 200, Attempts: 1, Duration: 7 * time.Millisecond})
	m.storeDuration.WithLabelValues("ping", ResultOK).Observe(0.0002)

	want := `
# HELP idem_execution_duration_seconds Time from receiving a call to its final answer, in seconds.
# TYPE idem_execution_duration_seconds histogram
idem_execution_duration_seconds_bucket{operation="business.show",le="0.005"} 0
idem_execution_duration_seconds_bucket{operation="business.show",le="0.01"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="0.025"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="0.05"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="0.1"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="0.25"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="0.5"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="1"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="2.5"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="5"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="10"} 1
idem_execution_duration_seconds_bucket{operation="business.show",le="+Inf"} 1
idem_execution_duration_seconds_sum{operation="business.show"} 0.007
idem_execution_duration_seconds_count{operation="business.show"} 1
# HELP idem_store_duration_seconds Latency of store calls, by method and result (ok, not_found, unavailable, cancelled, fenced, approval_not_consumable, another code in lower case, or other).
# TYPE idem_store_duration_seconds histogram
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.0005"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.001"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.0025"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.005"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.01"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.025"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.05"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.1"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.25"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="0.5"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="1"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="2.5"} 1
idem_store_duration_seconds_bucket{method="ping",result="ok",le="+Inf"} 1
idem_store_duration_seconds_sum{method="ping",result="ok"} 0.0002
idem_store_duration_seconds_count{method="ping",result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NameExecutionSeconds, NameStoreSeconds); err != nil {
		t.Error(err)
	}
}

func TestObserveAccumulates(t *testing.T) {
	m := New(prometheus.NewRegistry())
	const op = "order.refund"
	m.Observe(pipeline.Report{Operation: op, Status: 201, Keyed: true, Attempts: 2})
	m.Observe(pipeline.Report{Operation: op, Status: 201, Keyed: true, Attempts: 4})
	m.Observe(pipeline.Report{Operation: op, Status: 201, Keyed: true, Replayed: true})
	m.Observe(pipeline.Report{Operation: op, Status: 201, Keyed: true, Replayed: true})
	m.Observe(pipeline.Report{Operation: "order.show", Status: 200, Attempts: 1})

	if got := testutil.ToFloat64(m.retries.WithLabelValues(op)); got != 4 {
		t.Errorf("retries = %v, want 4 (1 + 3)", got)
	}
	if got := testutil.ToFloat64(m.replays.WithLabelValues(op)); got != 2 {
		t.Errorf("replays = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.executions.WithLabelValues(op, OutcomeSucceeded, "")); got != 2 {
		t.Errorf("succeeded = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.executions.WithLabelValues(op, OutcomeReplayed, "")); got != 2 {
		t.Errorf("replayed = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.replays.WithLabelValues("order.show")); got != 0 {
		t.Errorf("order.show replays = %v, want 0", got)
	}
}

func TestObserveConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	const goroutines, calls = 8, 200
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				m.Observe(pipeline.Report{Operation: "order.refund", Status: 201, Keyed: true, Replayed: true})
			}
		})
	}
	wg.Wait()
	if got := testutil.ToFloat64(m.replays.WithLabelValues("order.refund")); got != goroutines*calls {
		t.Errorf("replays = %v, want %d", got, goroutines*calls)
	}
	if got := sampleCount(t, reg, NameExecutionSeconds, map[string]string{"operation": "order.refund"}); got != goroutines*calls {
		t.Errorf("%s has %d samples, want %d", NameExecutionSeconds, got, goroutines*calls)
	}
}

func TestNewPanicsOnDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg)
	defer func() {
		if recover() == nil {
			t.Error("registering idem's collectors twice with one registry did not panic")
		}
	}()
	New(reg)
}

// histogram returns the observation count and sum of the histogram series
// of name whose labels include labels; zeros when there is none.
func histogram(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (count uint64, sum float64) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()
		}
	}
	return 0, 0
}

// sampleCount is the number of observations in the histogram series of
// name with labels; 0 when there is none.
func sampleCount(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) uint64 {
	t.Helper()
	n, _ := histogram(t, g, name, labels)
	return n
}

// sampleSum is the sum of the observations in the histogram series of name
// with labels.
func sampleSum(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	_, sum := histogram(t, g, name, labels)
	return sum
}

type fixedWriteStats struct{ transactions, calls int64 }

func (f fixedWriteStats) WriteStats() (int64, int64) { return f.transactions, f.calls }

func TestWriteStatsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterWriteStats(reg, fixedWriteStats{transactions: 3, calls: 40})
	got, err := testutil.GatherAndCount(reg, NameWriteTransactions, NameWriteCalls)
	if err != nil || got != 2 {
		t.Fatalf("gathered %d series (err %v), want 2", got, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range mfs {
		values[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	if values[NameWriteTransactions] != 3 || values[NameWriteCalls] != 40 {
		t.Errorf("exported %v, want transactions 3, calls 40", values)
	}
}

// A call refused by a configured rate limit counts under its limit; the
// admission bound's 429 (no limit named) does not.
func TestObserveRateLimited(t *testing.T) {
	m := New(prometheus.NewRegistry())
	const op = "order.refund"
	m.Observe(pipeline.Report{Operation: op, Status: 429, Code: idem.CodeRateLimited, Limit: "agent-writes"})
	m.Observe(pipeline.Report{Operation: op, Status: 429, Code: idem.CodeRateLimited, Limit: "agent-writes"})
	m.Observe(pipeline.Report{Operation: op, Status: 429, Code: idem.CodeRateLimited})
	if got := testutil.ToFloat64(m.rateLimited.WithLabelValues(op, "agent-writes")); got != 2 {
		t.Errorf("%s = %v, want 2", NameRateLimited, got)
	}
	if got := testutil.CollectAndCount(m.rateLimited); got != 1 {
		t.Errorf("%d series; want 1", got)
	}
}
