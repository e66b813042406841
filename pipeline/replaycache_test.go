package pipeline

import (
	"github.com/idem-run/idem"

	"bytes"
	"fmt"
	"testing"
	"time"
)

func completedAttempt(key string, body int, now time.Time) idem.Attempt {
	return idem.Attempt{
		Scope: idem.Scope{Org: "acme", Principal: "agent-1"}, Key: key, State: idem.AttemptCompleted,
		Status: 201, Body: make([]byte, body), CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		ObservedAt: now,
	}
}

func TestReplayCacheKeepsOnlyWhatCannotChange(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	c := newReplayCache(0)
	inFlight := completedAttempt("in-flight", 10, now)
	inFlight.State = idem.AttemptInFlight
	secret := completedAttempt("secret", 10, now)
	secret.SealedKeyID = "k1"
	indeterminate := completedAttempt("indeterminate", 10, now)
	indeterminate.State = idem.AttemptIndeterminate
	for _, a := range []idem.Attempt{inFlight, secret, indeterminate, completedAttempt("done", 10, now)} {
		c.put(a, now)
	}
	for _, key := range []string{"in-flight", "secret", "indeterminate"} {
		if _, _, ok := c.get(scope, key, now); ok {
			t.Errorf("%s record served from memory", key)
		}
	}
	if _, _, ok := c.get(scope, "done", now); !ok {
		t.Fatal("completed record not served from memory")
	}
	if _, _, ok := c.get(idem.Scope{Org: "acme", Principal: "agent-2"}, "done", now); ok {
		t.Error("another principal's record served")
	}
	// Retention: served until the margin before it ends, never after.
	if _, _, ok := c.get(scope, "done", now.Add(24*time.Hour-replayCacheMargin-time.Second)); !ok {
		t.Error("record dropped before its retention margin")
	}
	if _, _, ok := c.get(scope, "done", now.Add(24*time.Hour-replayCacheMargin)); ok {
		t.Error("record served within the margin before its retention ends")
	}
	if len(c.byKey) != 0 || c.bytes != 0 {
		t.Errorf("cache holds %d records, %d bytes after its only record expired", len(c.byKey), c.bytes)
	}
}

// The store's clock decides when a cached record stops being served: an
// instance whose own clock is minutes behind (or ahead) serves a copy for
// what the record had left when the store read it, counted by its own
// elapsed time, never until its own wall clock reaches the record's
// expiry (issue 28, item 4: an instance 45 s to 3 min behind answered a
// key the store had forgotten as a replay).
func TestReplayCacheJudgesExpiryByTheStoresClock(t *testing.T) {
	store := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	for _, skew := range []time.Duration{-3 * time.Minute, -45 * time.Second, 3 * time.Minute} {
		c := newReplayCache(0)
		a := completedAttempt("k", 10, store.Add(-24*time.Hour+2*time.Minute)) // 2 min left, by the store
		a.ObservedAt = store
		local := store.Add(skew)
		c.put(a, local)
		if _, _, ok := c.get(scope, "k", local.Add(time.Minute-time.Second)); !ok {
			t.Errorf("skew %s: record dropped before the margin", skew)
		}
		if _, _, ok := c.get(scope, "k", local.Add(time.Minute)); ok {
			t.Errorf("skew %s: record served within the margin of the store's expiry", skew)
		}
	}
}

func TestReplayCacheEvictsLeastRecentlyUsed(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	c := newReplayCache(64 << 10)
	for i := range 100 {
		c.put(completedAttempt(fmt.Sprint("k", i), 1000, now), now)
		if i >= 1 {
			c.get(scope, "k0", now) // k0 stays in use
		}
	}
	if c.bytes > c.maxBytes {
		t.Fatalf("cache holds %d bytes, bound %d", c.bytes, c.maxBytes)
	}
	if _, _, ok := c.get(scope, "k0", now); !ok {
		t.Error("the most used record was evicted")
	}
	if _, _, ok := c.get(scope, "k1", now); ok {
		t.Error("the least recently used record was kept over the bound")
	}
	if _, _, ok := c.get(scope, "k99", now); !ok {
		t.Error("the newest record was evicted")
	}
	if newReplayCache(-1) != nil {
		t.Error("a negative bound did not turn the cache off")
	}
}

// A cached replay's data is a part of its body, not a copy, when the
// record is stored compact (as the runner stores it), and the cache counts
// its bytes once; otherwise it keeps and counts both. The kept replay
// takes the place of the stored body, and only the record's own execution
// keeps one.
func TestReplayCacheKeepsReplayDataOnce(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	for _, tc := range []struct {
		stored string
		shared bool
	}{
		{`{"data":{"id":"t_1","n":[1,2]},"meta":{"executionId":"exe_1"}}`, true},
		{`{"data": {"id": "t_1"}, "meta": {"executionId": "exe_1"}}`, false},
	} {
		c := newReplayCache(0)
		a := completedAttempt("k", 0, now)
		a.Body, a.ExecutionID = []byte(tc.stored), "exe_1"
		c.put(a, now)
		before := c.bytes
		res, err := idem.ReplayResult(a.Status, nil, a.Body, "k")
		if err != nil {
			t.Fatal(err)
		}
		c.keepReplay(scope, "k", "exe_2", res)
		if _, kept, _ := c.get(scope, "k", now); kept != nil {
			t.Fatalf("%s: the replay of another execution was kept", tc.stored)
		}
		c.keepReplay(scope, "k", "exe_1", res)
		held, kept, ok := c.get(scope, "k", now)
		if !ok || kept == nil || !bytes.Equal(kept.Body(), res.Body()) || !bytes.Equal(kept.Data, res.Data) {
			t.Fatalf("%s: cached %+v", tc.stored, kept)
		}
		if held.Body != nil {
			t.Errorf("%s: the stored body is kept beside the replay", tc.stored)
		}
		body := kept.Body()
		shared := &kept.Data[0] == &body[len(`{"data":`)]
		want := len(body) + replayBytes - len(tc.stored)
		if !shared {
			want += len(res.Data)
		}
		if shared != tc.shared || c.bytes-before != want {
			t.Fatalf("%s: shared %v, counted %d bytes, want %d", tc.stored, shared, c.bytes-before, want)
		}
	}
}

// The cache remembers the keys of final records it does not hold (ghosts):
// evicted by its bound, or never cacheable (a secret, an indeterminate
// record); not a record in flight, nor a key it holds. The ghosts are
// bounded: two generations, the older dropped when the newer is full.
func TestReplayCacheRemembersWhatItDoesNotHold(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	c := newReplayCache(64 << 10)
	inFlight := completedAttempt("in-flight", 10, now)
	inFlight.State = idem.AttemptInFlight
	secret := completedAttempt("secret", 10, now)
	secret.SealedKeyID = "k1"
	indeterminate := completedAttempt("indeterminate", 10, now)
	indeterminate.State = idem.AttemptIndeterminate
	for _, a := range []idem.Attempt{inFlight, secret, indeterminate} {
		c.put(a, now)
	}
	for i := range 100 {
		c.put(completedAttempt(fmt.Sprint("k", i), 1000, now), now)
	}
	for key, want := range map[string]bool{"in-flight": false, "secret": true, "indeterminate": true, "k0": true, "k99": false, "never": false} {
		if got := c.known(scope, key); got != want {
			t.Errorf("known(%s) = %v, want %v", key, got, want)
		}
	}
	if _, _, ok := c.get(scope, "k99", now); !ok {
		t.Error("the newest record is not held")
	}
	c.gone.max = 2
	for i := range 5 {
		c.gone.add(keyOf(scope, fmt.Sprint("g", i)))
	}
	if len(c.gone.cur)+len(c.gone.old) > 2*c.gone.max || c.known(scope, "g0") || !c.known(scope, "g4") {
		t.Errorf("ghosts unbounded or the newest dropped: %d + %d held", len(c.gone.cur), len(c.gone.old))
	}
}
