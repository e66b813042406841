package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

type widgetIn struct {
	Name string `json:"name"`
}

type widgetShowIn struct {
	ID string `json:"id" in:"path"`
}

type widget struct {
	Name string `json:"name"`
}

// TestRunner wires Metrics into a Runner over SQLite, as the server does,
// and checks what a short session of calls records.
func TestRunner(t *testing.T) {
	create := idem.Define(idem.Metadata{
		Name: "widget.create", Method: "POST", Path: "/v1/widgets", Summary: "Create a widget",
		SideEffect:    idem.SideEffectWrite,
		Retry:         idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "widget.show", Rationale: "One widget per key."},
		SuccessStatus: http.StatusCreated,
	}, func(ctx context.Context, call *idem.Call, in widgetIn) (widget, error) {
		if in.Name == "boom" {
			return widget{}, errors.New("boom")
		}
		return widget(in), nil
	})
	var shows atomic.Int32
	show := idem.Define(idem.Metadata{
		Name: "widget.show", Method: "GET", Path: "/v1/widgets/{id}", Summary: "Show a widget",
		SideEffect:   idem.SideEffectRead,
		RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 1, BackoffMs: 1},
	}, func(ctx context.Context, call *idem.Call, in widgetShowIn) (widget, error) {
		if shows.Add(1) == 1 {
			return widget{}, idem.Retryable(errors.New("replica lagging"))
		}
		return widget{Name: in.ID}, nil
	})
	ops, err := idem.NewRegistry(create, show)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := New(reg)
	store := m.Store(inner)
	t.Cleanup(func() { store.Close() })
	runner, err := pipeline.New(ops, pipeline.Config{Store: store, Observe: m.Observe, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	agent := idem.Principal{Org: "acme", ID: "agent-1", Kind: idem.KindAgent}
	createReq := func(key, name string) idem.Invocation {
		return idem.Invocation{Operation: "widget.create", Principal: agent, Key: key, Intent: idem.Intent{Body: []byte(`{"name":"` + name + `"}`)}}
	}
	for _, c := range []struct {
		req    idem.Invocation
		status int
	}{
		{createReq("k1", "a"), http.StatusCreated},     // runs
		{createReq("k1", "a"), http.StatusCreated},     // replays
		{createReq("k2", "boom"), 500},                 // fails keyed: indeterminate
		{createReq("k2", "boom"), http.StatusConflict}, // says so
		{idem.Invocation{Operation: "widget.show", Principal: agent, Intent: idem.Intent{PathParams: map[string]string{"id": "w1"}}}, http.StatusOK},
	} {
		if resp := runner.Call(t.Context(), c.req); resp.Status != c.status {
			t.Fatalf("%s: status %d, want %d (%s)", c.req.Operation, resp.Status, c.status, resp.Body())
		}
	}
	if err := runner.Flush(t.Context()); err != nil { // the replay's audit event
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		metric prometheus.Counter
		want   float64
	}{
		{"created", m.executions.WithLabelValues("widget.create", OutcomeSucceeded, ""), 1},
		{"replayed", m.executions.WithLabelValues("widget.create", OutcomeReplayed, ""), 1},
		{"failed", m.executions.WithLabelValues("widget.create", OutcomeFailed, string(idem.CodeExecutionFailed)), 1},
		{"indeterminate answer", m.executions.WithLabelValues("widget.create", OutcomeFailed, string(idem.CodeIdempotencyResultIndeterminate)), 1},
		{"shown", m.executions.WithLabelValues("widget.show", OutcomeSucceeded, ""), 1},
		{"replays", m.replays.WithLabelValues("widget.create"), 1},
		{"indeterminate", m.indeterminate.WithLabelValues("widget.create"), 2},
		{"in-flight conflicts", m.inFlight.WithLabelValues("widget.create"), 0},
		{"create retries", m.retries.WithLabelValues("widget.create"), 0},
		{"show retries", m.retries.WithLabelValues("widget.show"), 1},
	} {
		if got := testutil.ToFloat64(c.metric); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	for _, op := range []string{"widget.create", "widget.show"} {
		want := map[string]uint64{"widget.create": 4, "widget.show": 1}[op]
		if n := sampleCount(t, reg, NameExecutionSeconds, map[string]string{"operation": op}); n != want {
			t.Errorf("%s{operation=%q} has %d samples, want %d", NameExecutionSeconds, op, n, want)
		}
	}
	for _, c := range []struct {
		method, result string
		want           uint64
	}{
		// No stage-5 read of a new key (no policy, no approval: the
		// reservation reads the key); k1's replay from memory; k2's
		// indeterminate record, which the replay cache may not hold but
		// remembers it saw (ghosts), read by GetAttempt.
		{"get_attempt", ResultNotFound, 0},
		{"get_attempt", ResultOK, 1},
		{"reserve", ResultOK, 2},
		{"complete", ResultOK, 2},
		{"append_events", ResultOK, 1},
		{"record_executions", ResultOK, 1}, // widget.show, a fresh read, through the audit queue
	} {
		labels := map[string]string{"method": c.method, "result": c.result}
		if n := sampleCount(t, reg, NameStoreSeconds, labels); n != c.want {
			t.Errorf("%s%v has %d samples, want %d", NameStoreSeconds, labels, n, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.storeDuration); n != 5 {
		t.Errorf("%s has %d series, want 5", NameStoreSeconds, n)
	}
}
