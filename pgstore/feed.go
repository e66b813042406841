package pgstore

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/idem-run/idem"
)

// completedChannel is the NOTIFY channel Complete signals on, in the
// completion's own transaction (so delivered only once it commits), for
// watched records only: PostgreSQL serialises the commits of notifying
// transactions on one cluster-wide lock, so a NOTIFY per completion would
// cap the completion rate.
const completedChannel = "idem_completed"

// listenSQL listens on completedChannel, watchSQL marks a record watched.
var (
	listenSQL = statement("listen")
	watchSQL  = statement("watch")
)

// feed is the store's one LISTEN connection, fanned out to the
// subscribers of Completions. It starts with the first subscriber and ends
// when the store closes.
type feed struct {
	mu      sync.Mutex
	subs    map[chan idem.ScopedKey]struct{}
	started bool
	closed  bool
	stop    context.CancelFunc
	done    chan struct{}
}

var _ idem.CompletionFeed = (*Store)(nil)

// Completions implements idem.CompletionFeed with LISTEN idem_completed on
// a connection of the store's own, taken out of the pool.
func (s *Store) Completions(ctx context.Context) <-chan idem.ScopedKey {
	f := &s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan idem.ScopedKey, 256)
	if f.closed {
		close(ch)
		return ch
	}
	if f.subs == nil {
		f.subs = map[chan idem.ScopedKey]struct{}{}
	}
	f.subs[ch] = struct{}{}
	if !f.started {
		f.started = true
		lctx, cancel := context.WithCancel(context.Background())
		f.stop, f.done = cancel, make(chan struct{})
		go s.listen(lctx)
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-f.done:
			return // the store closed: listen closed every channel
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[ch]; ok {
			delete(f.subs, ch)
			close(ch)
		}
	}()
	return ch
}

// listen holds the LISTEN connection until ctx ends, reconnecting after
// failures (completions signalled meanwhile are missed; waiters poll too).
func (s *Store) listen(ctx context.Context) {
	f := &s.feed
	defer func() {
		f.mu.Lock()
		for ch := range f.subs {
			close(ch)
		}
		f.subs = nil
		f.mu.Unlock()
		close(f.done)
	}()
	for backoff := 100 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, 5*time.Second) {
		if s.listenOnce(ctx) {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// listenOnce listens on one connection until it fails or ctx ends, and
// reports whether it got as far as listening.
func (s *Store) listenOnce(ctx context.Context) bool {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false
	}
	conn := pc.Hijack() // a LISTENing connection must not go back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		return false
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		var k [3]string
		if json.Unmarshal([]byte(n.Payload), &k) != nil {
			continue
		}
		s.feed.deliver(idem.ScopedKey{Scope: idem.Scope{Org: k[0], Principal: k[1]}, Key: k[2]})
	}
}

// deliver hands key to every subscriber that has room.
func (f *feed) deliver(key idem.ScopedKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- key:
		default: // best effort: a waiter behind a full channel polls
		}
	}
}

// close stops the listener and waits for it, closing every subscriber's
// channel.
func (f *feed) close() {
	f.mu.Lock()
	f.closed = true
	started, stop, done := f.started, f.stop, f.done
	f.mu.Unlock()
	if started {
		stop()
		<-done
	}
}

// Watch implements idem.CompletionFeed: it marks the in-flight record of
// (scope, key) so that its completion, on whichever instance, signals
// NOTIFY idem_completed. One statement; nothing when the record is no
// longer in flight (the caller polls it anyway).
func (s *Store) Watch(ctx context.Context, scope idem.Scope, key string) error {
	_, err := s.pool.Exec(ctx, watchSQL, scope.Org, scope.Principal, key)
	return interpretError(ctx, "watch attempt", err)
}

// notifyPayload is what Complete signals: the record's org, principal and
// key as a JSON array.
func notifyPayload(scope idem.Scope, key string) string {
	b, _ := json.Marshal([3]string{scope.Org, scope.Principal, key})
	return string(b)
}
