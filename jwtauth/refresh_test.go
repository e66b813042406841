package jwtauth_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/jwtauth"
)

// hangAfterNew makes is's key endpoint stop answering (until the test
// ends, or release is called) and returns release.
func (is *issuer) hangAfterNew(t *testing.T) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	is.mu.Lock()
	is.hang = ch
	is.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			is.mu.Lock()
			is.hang = nil
			is.mu.Unlock()
			close(ch)
		})
	}
	t.Cleanup(release) // before the issuer's server closes: cleanups run last first
	return release
}

// TestHungKeyEndpoint (issue 28, item 11): once the key set is due for a
// refresh and the issuer's key endpoint hangs, requests signed with keys
// already known are answered at once, the refresh running behind them (one
// fetch for all); only a token naming an unknown kid waits for it, and no
// longer than its request's context (or FetchTimeout). When the endpoint
// answers again, the new keys are used.
func TestHungKeyEndpoint(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	a := newAuth(t, is.config(clock)) // FetchTimeout: the default 10 s
	release := is.hangAfterNew(t)
	clock.Advance(jwtauth.DefaultRefreshInterval)

	known := rs.sign(t, claims(clock.Now(), nil))
	var latencies []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			began := time.Now()
			_, err := a.Authenticate(bearer(known))
			took := time.Since(began)
			mu.Lock()
			latencies = append(latencies, took)
			mu.Unlock()
			if err != nil {
				t.Errorf("a token of a known key, while the key endpoint hangs: %v", err)
			}
		})
	}
	wg.Wait()
	slices.Sort(latencies)
	worst := latencies[len(latencies)-1]
	t.Logf("figures: 50 known-key requests while the key endpoint hangs: median %s, max %s (FetchTimeout %s)",
		latencies[len(latencies)/2], worst, jwtauth.DefaultFetchTimeout)
	if worst > time.Second {
		t.Fatalf("a known-key request waited %s for the hung key endpoint", worst)
	}
	select { // the refresh has reached the endpoint, and hangs there
	case <-is.hanging:
	case <-time.After(time.Minute):
		t.Fatal("no refresh reached the key endpoint")
	}
	if n := is.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (New's, then one refresh for all the requests)", n)
	}

	// An unknown kid waits for the refresh, no longer than its context.
	next := rsaKey(t, "rsa-2")
	token := next.sign(t, claims(clock.Now(), nil))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := a.Authenticate(bearer(token).WithContext(ctx))
	took := time.Since(began)
	t.Logf("figures: an unknown kid while the key endpoint hangs, its request's context ending after 200ms: answered after %s", took)
	refused(t, token, err, `kid="rsa-2" is not in the issuer's key set as fetched at 2026-12-02T06:00:00Z; it is being fetched again, and the request ended before it arrived; retry`)
	if took > 5*time.Second {
		t.Fatalf("an unknown kid waited %s, past its request's context", took)
	}

	// The endpoint answers again, with the new key: the refresh in flight
	// lands and the new key verifies.
	is.publish(rs, next)
	release()
	jwtauth.WaitForRefresh(a)
	if _, err := a.Authenticate(bearer(token)); err != nil {
		t.Fatalf("the new key after the endpoint recovered: %v", err)
	}
	if n := is.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

// TestHungKeyEndpointUnknownKidBound: an unknown kid whose request has no
// deadline waits at most FetchTimeout for a hung key endpoint.
func TestHungKeyEndpointUnknownKidBound(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	cfg := is.config(clock)
	cfg.FetchTimeout = 200 * time.Millisecond
	a := newAuth(t, cfg)
	is.hangAfterNew(t)
	clock.Advance(jwtauth.DefaultMinRefreshInterval)
	k := rs
	k.kid = "rsa-2"
	token := k.sign(t, claims(clock.Now(), nil))
	began := time.Now()
	_, err := a.Authenticate(bearer(token))
	took := time.Since(began)
	refused(t, token, err, `kid="rsa-2" is not in the issuer's key set as fetched at 2026-12-02T06:00:00Z: the key set could not be fetched again`)
	if took > 5*time.Second {
		t.Fatalf("an unknown kid waited %s with FetchTimeout %s", took, cfg.FetchTimeout)
	}
	// Meanwhile and after, the known key is served.
	if _, err := a.Authenticate(bearer(rs.sign(t, claims(clock.Now(), nil)))); err != nil {
		t.Fatal(err)
	}
}

// TestReusedKid (issue 26, item 8): an issuer that replaces the key behind
// a kid (same kid, new key) is followed at once: the first token that does
// not verify with the cached key of its kid refetches the set, at most
// once per MinRefreshInterval, and verifies with the new key.
func TestReusedKid(t *testing.T) {
	clock := fakeclock.New(start)
	old := rsaKey(t, "main")
	is := newIssuer(t, old)
	a := newAuth(t, is.config(clock))

	replaced := rsaKey(t, "main")
	is.publish(replaced)
	clock.Advance(jwtauth.DefaultMinRefreshInterval)
	token := replaced.sign(t, claims(clock.Now(), nil))
	if _, err := a.Authenticate(bearer(token)); err != nil {
		t.Fatalf("a token of the key now behind kid \"main\": %v", err)
	}
	if n := is.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}

	// A token that verifies with no key of that kid (forged, or the old
	// key's) refetches at most once per MinRefreshInterval.
	for range 5 {
		token = old.sign(t, claims(clock.Now(), nil))
		_, err := a.Authenticate(bearer(token))
		refused(t, token, err, `the token's signature does not verify with the issuer's key kid="main"; get a new token from the issuer`)
	}
	if n := is.hits.Load(); n != 2 {
		t.Fatalf("%d fetches within MinRefreshInterval, want 2", n)
	}
	clock.Advance(jwtauth.DefaultMinRefreshInterval)
	_, err := a.Authenticate(bearer(old.sign(t, claims(clock.Now(), nil))))
	refused(t, token, err, `does not verify`)
	if n := is.hits.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
}
