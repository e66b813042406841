package pipeline_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

// sweepCounter tells a test when the sweeper has swept.
type sweepCounter struct {
	idem.Store
	sweeps atomic.Int64
	swept  chan struct{} // closed after the first Sweep
	params idem.SweepParams
}

func (s *sweepCounter) Sweep(ctx context.Context, p idem.SweepParams) (idem.SweepResult, error) {
	res, err := s.Store.Sweep(ctx, p)
	s.params = p
	if s.sweeps.Add(1) == 1 {
		close(s.swept)
	}
	return res, err
}

// Completions passes the store's feed on (an embedded interface value
// hides the optional abilities the runner finds by type assertion).
func (s *sweepCounter) Completions(ctx context.Context) <-chan idem.ScopedKey {
	if f, ok := s.Store.(idem.CompletionFeed); ok {
		return f.Completions(ctx)
	}
	return nil
}

// TestRunnerLifecycleLeavesNoGoroutine starts a runner on each store,
// serves a first call and a replay (whose audit event is queued), stops it,
// closes the store, and finds no goroutine left of idem's: the sweeper,
// the completion feed (PostgreSQL's LISTEN) and the audit queue all ended.
func TestRunnerLifecycleLeavesNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) idem.Store
	}{
		{"sqlite", func(t *testing.T) idem.Store {
			s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"postgres", func(t *testing.T) idem.Store {
			s, err := pgstore.Open(t.Context(), pgtest.NewDatabase(t), idem.StoreConfig{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opened := tc.open(t) // before the snapshot: pgtest's own goroutines stay
			opened.Close()
			ignore := goleak.IgnoreCurrent()

			store := &sweepCounter{Store: tc.open(t), swept: make(chan struct{})}
			var runs atomic.Int64
			reg, err := idem.NewRegistry(refundOp(&runs), showOp())
			if err != nil {
				t.Fatal(err)
			}
			r, err := pipeline.New(reg, pipeline.Config{Store: store, SweepInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := r.Start(t.Context()); !errors.Is(err, pipeline.ErrRunnerStarted) {
				t.Fatalf("a second Start = %v, want ErrRunnerStarted", err)
			}
			<-store.swept // the first sweep runs at once, not after an interval
			for range 2 {
				req := idem.Invocation{
					Operation: "order.refund",
					Principal: agent,
					Key:       "lifecycle-1",
					Intent:    idem.Intent{PathParams: map[string]string{"id": "ord_1"}, Body: []byte(`{"amount":10}`)},
				}
				if res := r.Call(t.Context(), req); res.Status != 200 {
					t.Fatalf("call: %d %s", res.Status, res.Body())
				}
			}
			if runs.Load() != 1 {
				t.Fatalf("the handler ran %d times, want 1", runs.Load())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			store.Close()
			goleak.VerifyNone(t, ignore)
		})
	}
}

// The sweeper passes Config.AuditRetention on (negative: forever,
// which SweepParams spells 0).
func TestRunnerSweepsWithTheAuditRetention(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retention time.Duration
		want      time.Duration
	}{
		{"the default", 0, pipeline.DefaultAuditRetention},
		{"a given one", 48 * time.Hour, 48 * time.Hour},
		{"forever", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &sweepCounter{Store: newSQLiteStore(t, nil), swept: make(chan struct{})}
			var runs atomic.Int64
			reg, err := idem.NewRegistry(refundOp(&runs), showOp())
			if err != nil {
				t.Fatal(err)
			}
			r, err := pipeline.New(reg, pipeline.Config{Store: store, AuditRetention: tc.retention})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			<-store.swept
			if err := r.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if store.params.AuditRetention != tc.want || store.params.BatchSize <= 0 {
				t.Fatalf("Sweep got %+v, want AuditRetention %s and a batch size", store.params, tc.want)
			}
		})
	}
}
