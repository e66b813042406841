package jwtauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// minRSABits is the smallest RSA key of a key set that is used.
const minRSABits = 2048

// keySet is the issuer's key set, cached. It is refreshed when a request
// finds it older than refresh, or a token names a kid it does not hold (or
// fails to verify with the key of its kid, which the issuer may have
// replaced); in every case at most once per minRefresh, however many
// requests ask, and one fetch at a time.
//
// A fetch runs in a goroutine of its own, bounded by timeout, so that no
// request waits for it unless it must: a request whose key is cached is
// answered with the cached set while the refresh runs behind it (a hung key
// endpoint delays nobody whose key is known); only a token whose key is not
// cached waits for the fetch, no longer than its own context. Nothing
// outlives a fetch, so there is nothing to close.
type keySet struct {
	url        string
	client     *http.Client
	timeout    time.Duration
	now        func() time.Time
	refresh    time.Duration
	minRefresh time.Duration

	mu        sync.Mutex
	keys      []jose.JSONWebKey // the usable public signing keys
	fetched   time.Time         // when the fetch of the keys started
	attempted time.Time         // when the last fetch, successful or not, started
	lastErr   error             // of the last fetch, nil when it succeeded
	inflight  *fetchCall        // the fetch running, if any
}

// errWaitEnded is a request that ended while it waited for a fetch.
var errWaitEnded = errors.New("the request ended while the key set was being fetched")

// fetchCall is one fetch of the key set; done closes when it ends.
type fetchCall struct {
	done chan struct{}
	err  error
}

// keySetError is a key set that could not be fetched or read.
type keySetError struct {
	url string
	msg string
	err error
}

func (e *keySetError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("the key set at %s %s: %v", e.url, e.msg, e.err)
	}
	return fmt.Sprintf("the key set at %s %s", e.url, e.msg)
}

func (e *keySetError) Unwrap() error { return e.err }

// fetch reads the key set and keeps its usable keys: public RSA (2048
// bits or more), ECDSA and Ed25519 keys whose use, if given, is sig.
// Symmetric (oct) keys, encryption keys and keys this library cannot
// read are skipped, so that one odd key does not hide the others.
func (s *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, &keySetError{url: s.url, msg: "cannot be requested", err: err}
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, &keySetError{url: s.url, msg: "cannot be fetched", err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxKeySetBytes))
		return nil, &keySetError{url: s.url, msg: fmt.Sprintf("answered %s, not 200 OK", resp.Status)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxKeySetBytes+1))
	if err != nil {
		return nil, &keySetError{url: s.url, msg: "cannot be read", err: err}
	}
	if len(body) > MaxKeySetBytes {
		return nil, &keySetError{url: s.url, msg: fmt.Sprintf("is larger than %d bytes", MaxKeySetBytes)}
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, &keySetError{url: s.url, msg: `is not a JSON Web Key Set ({"keys": […]})`, err: err}
	}
	var keys []jose.JSONWebKey
	var skipped []string
	for i, raw := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			skipped = append(skipped, fmt.Sprintf("keys[%d] cannot be read", i))
			continue
		}
		if reason := unusable(&k); reason != "" {
			skipped = append(skipped, fmt.Sprintf("keys[%d] (kid=%s) %s", i, quote(k.KeyID), reason))
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		msg := "has no usable signing key"
		if len(skipped) > 0 {
			msg += " (" + strings.Join(skipped, "; ") + ")"
		}
		return nil, &keySetError{url: s.url, msg: msg}
	}
	return keys, nil
}

// unusable says why k cannot verify tokens, or "" when it can. A private
// key is reduced to its public half.
func unusable(k *jose.JSONWebKey) string {
	if k.Use != "" && k.Use != "sig" {
		return fmt.Sprintf("is for use %q, not sig", k.Use)
	}
	if !k.IsPublic() {
		if _, ok := k.Key.([]byte); ok {
			return "is a symmetric (oct) key, which a public key set must not carry"
		}
		*k = k.Public()
	}
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		if key.N.BitLen() < minRSABits {
			return fmt.Sprintf("is an RSA key of %d bits, fewer than %d", key.N.BitLen(), minRSABits)
		}
	case *ecdsa.PublicKey, ed25519.PublicKey:
	default:
		return "is not an RSA, EC or Ed25519 public key"
	}
	return ""
}

// fits reports whether k can verify a signature of alg.
func fits(k jose.JSONWebKey, alg string) bool {
	if k.Algorithm != "" && k.Algorithm != alg {
		return false
	}
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return key.Curve == elliptic.P256()
		case "ES384":
			return key.Curve == elliptic.P384()
		case "ES512":
			return key.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// load fetches the key set and keeps it, in the caller's goroutine (New).
func (s *keySet) load(ctx context.Context) error {
	began := s.now()
	keys, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempted, s.lastErr = began, err
	if err == nil {
		s.keys, s.fetched = keys, began
	}
	return err
}

// startFetch returns the fetch in flight, else starts one, unless the last
// one started less than minRefresh ago (then nil). s.mu is held. The fetch
// keeps ctx's values, not its end: requests share it.
func (s *keySet) startFetch(ctx context.Context) *fetchCall {
	if s.inflight != nil {
		return s.inflight
	}
	if s.limited() {
		return nil
	}
	c := &fetchCall{done: make(chan struct{})}
	began := s.now()
	s.inflight, s.attempted = c, began
	go func() {
		keys, err := s.fetch(context.WithoutCancel(ctx)) // bounded by s.timeout
		s.mu.Lock()
		s.lastErr, s.inflight, c.err = err, nil, err
		if err == nil {
			s.keys, s.fetched = keys, began
		}
		s.mu.Unlock()
		close(c.done)
	}()
	return c
}

// limited reports whether the last fetch started too recently for another;
// s.mu is held.
func (s *keySet) limited() bool {
	return !s.attempted.IsZero() && s.now().Sub(s.attempted) < s.minRefresh
}

// cached returns the cached keys and, when they are older than refresh,
// starts their refresh without waiting for it. A failed refresh keeps the
// keys it had: an issuer's outage does not refuse tokens signed with keys
// already known.
func (s *keySet) cached(ctx context.Context) []jose.JSONWebKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.now().Sub(s.fetched) >= s.refresh {
		s.startFetch(ctx)
	}
	return s.keys
}

// refetch waits for a fresh fetch of the key set (the one in flight, or a
// new one unless the last started less than minRefresh ago), no longer
// than ctx, and returns the keys then cached. fetched reports whether a
// fetch ran for the caller; err is its error, or the last fetch's when
// none could run.
func (s *keySet) refetch(ctx context.Context) (keys []jose.JSONWebKey, fetched bool, err error) {
	s.mu.Lock()
	c := s.startFetch(ctx)
	if c == nil {
		defer s.mu.Unlock()
		return s.keys, false, s.lastErr
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		err = c.err
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", errWaitEnded, ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys, true, err
}

// lookupError is why no key verifies a token, in the caller's terms.
type lookupError struct {
	msg string
	err error // the last fetch's error, if the key set could not be refreshed
}

func (e *lookupError) Error() string { return e.msg }
func (e *lookupError) Unwrap() error { return e.err }

// lookup returns the key that verifies a token of kid and alg. A kid
// the cached set lacks refetches the set (the issuer may have rotated its
// keys), at most once per minRefresh; only then does the request wait.
func (s *keySet) lookup(ctx context.Context, kid, alg string) (jose.JSONWebKey, error) {
	k, found, err := pick(s.cached(ctx), kid, alg)
	if found || err != nil {
		return k, err
	}
	keys, refetched, fetchErr := s.refetch(ctx)
	if k, found, err = pick(keys, kid, alg); found || err != nil {
		return k, err
	}
	s.mu.Lock()
	fetched, next := s.fetched, s.attempted.Add(s.minRefresh)
	s.mu.Unlock()
	if kid == "" {
		return k, &lookupError{msg: fmt.Sprintf("no key of the issuer's key set signs with alg=%s", alg), err: fetchErr}
	}
	msg := fmt.Sprintf("the token's key id kid=%s is not in the issuer's key set", quote(kid))
	switch {
	case errors.Is(fetchErr, errWaitEnded):
		msg += fmt.Sprintf(" as fetched at %s; it is being fetched again, and the request ended before it arrived; retry", stamp(fetched))
	case fetchErr != nil:
		msg += fmt.Sprintf(" as fetched at %s: the key set could not be fetched again; retry after %s", stamp(fetched), stamp(next))
	case !refetched:
		msg += fmt.Sprintf(" as fetched at %s; if the issuer rotated its keys since, retry after %s, else get a new token from the issuer", stamp(fetched), stamp(next))
	default:
		msg += "; get a new token from the issuer"
	}
	return k, &lookupError{msg: msg, err: fetchErr}
}

// replacement returns the key now behind kid when it is not old: a token
// that does not verify with the cached key of its kid refetches the set
// (the issuer may have replaced the key and kept the kid), at most once per
// minRefresh, waiting as for an unknown kid. ok is false when no other key
// could be found.
func (s *keySet) replacement(ctx context.Context, kid, alg string, old jose.JSONWebKey) (key jose.JSONWebKey, ok bool) {
	keys, refetched, err := s.refetch(ctx)
	if !refetched || err != nil {
		return key, false
	}
	k, found, err := pick(keys, kid, alg)
	if !found || err != nil || samePublicKey(k, old) {
		return key, false
	}
	return k, true
}

// samePublicKey reports whether a and b hold the same public key.
func samePublicKey(a, b jose.JSONWebKey) bool {
	eq, ok := a.Key.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b.Key)
}

// pick chooses the key for kid and alg among keys. found is false when no
// key has that kid (or, without a kid, none fits alg), which may change
// after a refresh; err is a refusal a refresh would not change.
func pick(keys []jose.JSONWebKey, kid, alg string) (key jose.JSONWebKey, found bool, err error) {
	if kid != "" {
		named := false
		for _, k := range keys {
			if k.KeyID != kid {
				continue
			}
			named = true
			if fits(k, alg) {
				return k, true, nil
			}
		}
		if named {
			return key, true, &lookupError{msg: fmt.Sprintf("the issuer's key kid=%s does not sign with the token's alg=%s", quote(kid), alg)}
		}
		return key, false, nil
	}
	var fit []jose.JSONWebKey
	for _, k := range keys {
		if fits(k, alg) {
			fit = append(fit, k)
		}
	}
	switch len(fit) {
	case 0:
		return key, false, nil
	case 1:
		return fit[0], true, nil
	}
	return key, true, &lookupError{msg: fmt.Sprintf("the token names no key id (kid) and the issuer's key set has %d keys for alg=%s; the issuer must set kid", len(fit), alg)}
}
