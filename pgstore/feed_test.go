package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// The completion of a watched record on one instance reaches the other
// instance's feed, and an unwatched one signals nothing; the feed's channel
// closes when its context ends and when the store closes.
func TestCompletionFeedAcrossInstances(t *testing.T) {
	url := pgtest.NewDatabase(t)
	open := func() *pgstore.Store {
		s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	keys := b.Completions(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	gone := b.Completions(ctx)

	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	// The LISTEN starts in the background: complete keys until one arrives.
	deadline := time.After(20 * time.Second)
	completed := map[string]bool{}
	for i := 0; ; i++ {
		key := "feed-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
		res, err := a.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "order.refund", Fingerprint: "f"},
			Key:         key, Lease: time.Minute, Retention: time.Hour,
		})
		if err != nil || !res.Reserved {
			t.Fatalf("reserve: %v %v", res.Reserved, err)
		}
		// A record nobody watches completes silently first; then the
		// watched one, watched from the other instance.
		quiet := completeQuietly(t, a, scope, key+"-unwatched")
		if err := b.Watch(t.Context(), scope, key); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Complete(t.Context(), idem.CompleteParams{Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken, Status: 201,
			Body: []byte(`{}`), Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}); err != nil {
			t.Fatal(err)
		}
		completed[key] = true
		select {
		case got := <-keys:
			if got.Scope != scope || !completed[got.Key] {
				t.Fatalf("feed delivered %+v, want one of the watched keys completed for %+v (not %s)", got, scope, quiet)
			}
			cancel()
			for range gone { // drained, then closed on cancel
			}
			b.Close()
			for range keys { // closed on Close
			}
			return
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no completion reached the other instance's feed in 20 s")
		}
	}
}

// completeQuietly reserves and completes key on s without watching it.
func completeQuietly(t *testing.T, s *pgstore.Store, scope idem.Scope, key string) string {
	t.Helper()
	res, err := s.Reserve(t.Context(), idem.ReserveParams{
		StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "order.refund", Fingerprint: "f"},
		Key:         key, Lease: time.Minute, Retention: time.Hour,
	})
	if err != nil || !res.Reserved {
		t.Fatalf("reserve %s: %v %v", key, res.Reserved, err)
	}
	if _, err := s.Complete(t.Context(), idem.CompleteParams{Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken, Status: 201,
		Body: []byte(`{}`), Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}); err != nil {
		t.Fatal(err)
	}
	return key
}

// A keyed transactional execution that rolls back on one instance signals
// its key to the other instance's feed, though nothing of it committed
// (issue 33 item 7); one that commits with nobody watching signals
// nothing, as before.
func TestRolledBackTransactionSignalsOtherInstances(t *testing.T) {
	url := pgtest.NewDatabase(t)
	open := func() *pgstore.Store {
		s, err := pgstore.Open(context.Background(), url, idem.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	keys := b.Completions(t.Context())
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	params := func(key string) idem.ReserveParams {
		return idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "order.refund", Fingerprint: "f"},
			Key:         key, Lease: time.Minute, Retention: time.Hour,
		}
	}
	// The LISTEN starts in the background: roll back keys until one
	// arrives (before the fix none ever did).
	deadline := time.After(20 * time.Second)
	rolledBack := map[string]bool{}
	for {
		key := "rb-" + time.Now().Format("150405.000000")
		quiet := "ok-" + key
		committed, err := a.Transact(t.Context(), params(quiet), func(context.Context, any) idem.TxOutcome {
			return idem.TxOutcome{Result: idem.CompleteParams{Status: 201, Body: []byte(`{}`),
				Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1}}}
		})
		if err != nil || !committed.Committed {
			t.Fatalf("a committed transaction: %+v, %v", committed, err)
		}
		res, err := a.Transact(t.Context(), params(key), func(context.Context, any) idem.TxOutcome { return idem.TxOutcome{Abort: true} })
		if err != nil || !res.Reserved || res.Committed {
			t.Fatalf("a rolled-back transaction: %+v, %v", res, err)
		}
		rolledBack[key] = true
		select {
		case got := <-keys:
			if got.Scope != scope || !rolledBack[got.Key] {
				t.Fatalf("feed delivered %+v, want one of the rolled-back keys (not a committed one such as %s)", got, quiet)
			}
			return
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no rolled-back execution reached the other instance's feed in 20 s")
		}
	}
}
