package linearize

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	"idem"
)

// Deliberately broken stores, to show that the checker has teeth: each
// wraps a real store and breaks one guarantee of the attempt record.

// noFingerprintStore skips the fingerprint check: an existing record comes
// back carrying the caller's fingerprint, so a same-key request with a
// different body replays the first one's result instead of answering 422.
// GetAttempt finds nothing, so that every existing record is seen through
// Reserve, which knows the caller's fingerprint.
type noFingerprintStore struct{ idem.Store }

// Transact runs transactional operations (business.create) unbroken:
// inside the store's transaction there is nothing of the two-phase path to
// break.
func (s noFingerprintStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return s.Store.(idem.Transactor).Transact(ctx, p, run)
}

func (s noFingerprintStore) GetAttempt(context.Context, idem.Scope, string) (idem.Attempt, error) {
	return idem.Attempt{}, idem.ErrNotFound
}

func (s noFingerprintStore) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	res, err := s.Store.Reserve(ctx, p)
	if err == nil && !res.Reserved {
		res.Attempt.Fingerprint = p.Fingerprint
	}
	return res, err
}

// noLockStore skips the lock: Reserve always reserves, under a fresh
// internal key, so concurrent same-key calls that both passed the existing
// attempt check (stage 5) both execute. GetAttempt and Complete follow the
// latest internal key, so sequential calls still replay.
type noLockStore struct {
	idem.Store
	mu      sync.Mutex
	latest  map[string]string // scope and key → latest internal key
	byFence map[int64]string  // fencing token → internal key
}

func newNoLockStore(s idem.Store) idem.Store {
	return &noLockStore{Store: s, latest: map[string]string{}, byFence: map[int64]string{}}
}

func scopedKey(s idem.Scope, key string) string { return s.Org + "\x00" + s.Principal + "\x00" + key }

// Transact runs transactional operations unbroken, as noFingerprintStore's.
func (s *noLockStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return s.Store.(idem.Transactor).Transact(ctx, p, run)
}

func (s *noLockStore) Reserve(ctx context.Context, p idem.ReserveParams) (idem.ReserveResult, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	key := p.Key
	p.Key = key + "~" + hex.EncodeToString(b[:])
	res, err := s.Store.Reserve(ctx, p)
	if err != nil {
		return res, err
	}
	s.mu.Lock()
	s.latest[scopedKey(p.Scope, key)] = p.Key
	s.byFence[res.Attempt.FencingToken] = p.Key
	s.mu.Unlock()
	res.Attempt.Key = key
	return res, nil
}

func (s *noLockStore) GetAttempt(ctx context.Context, scope idem.Scope, key string) (idem.Attempt, error) {
	s.mu.Lock()
	internal, ok := s.latest[scopedKey(scope, key)]
	s.mu.Unlock()
	if !ok {
		return idem.Attempt{}, idem.ErrNotFound
	}
	a, err := s.Store.GetAttempt(ctx, scope, internal)
	a.Key = key
	return a, err
}

func (s *noLockStore) Complete(ctx context.Context, p idem.CompleteParams) (idem.Attempt, error) {
	key := p.Key
	s.mu.Lock()
	if internal, ok := s.byFence[p.FencingToken]; ok {
		p.Key = internal
	}
	s.mu.Unlock()
	a, err := s.Store.Complete(ctx, p)
	a.Key = key
	return a, err
}
