package linearize

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"

	"github.com/idem-run/idem"
)

// Deliberately broken stores, to show that the checker has teeth: each
// wraps a real store and breaks one guarantee of the attempt record. Each
// is an idem.Transactor too (the runner runs lin.put only on one): the
// first two pass transactional executions through unbroken.

// transact runs a transactional execution on s, the wrapped store.
func transact(ctx context.Context, s idem.Store, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return s.(idem.Transactor).Transact(ctx, p, run)
}

// noFingerprintStore skips the fingerprint check: an existing record comes
// back carrying the caller's fingerprint, so a same-key request with a
// different body replays the first one's result instead of answering 422.
// GetAttempt finds nothing, so that every existing record is seen through
// Reserve, which knows the caller's fingerprint.
type noFingerprintStore struct{ idem.Store }

func (s noFingerprintStore) GetAttempt(context.Context, idem.GetAttemptParams) (idem.Attempt, error) {
	return idem.Attempt{}, idem.ErrNotFound
}

func (s noFingerprintStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return transact(ctx, s.Store, p, run)
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
// attempt check (stage 5) both execute. GetAttempt follows the latest
// internal key, Complete and Release the fence's, so sequential calls
// still replay.
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

func (s *noLockStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return transact(ctx, s.Store, p, run)
}

func (s *noLockStore) GetAttempt(ctx context.Context, p idem.GetAttemptParams) (idem.Attempt, error) {
	s.mu.Lock()
	internal, ok := s.latest[scopedKey(p.Scope, p.Key)]
	s.mu.Unlock()
	if !ok {
		return idem.Attempt{}, idem.ErrNotFound
	}
	a, err := s.Store.GetAttempt(ctx, idem.GetAttemptParams{Scope: p.Scope, Key: internal})
	a.Key = p.Key
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

// Release follows the fencing token to the internal key, as Complete does.
func (s *noLockStore) Release(ctx context.Context, p idem.ReleaseParams) error {
	s.mu.Lock()
	if internal, ok := s.byFence[p.FencingToken]; ok {
		p.Key = internal
	}
	s.mu.Unlock()
	return s.Store.Release(ctx, p)
}

// abortCommitsStore ignores Abort: a transactional execution whose handler
// failed commits anyway, its handler's writes with its record, completed
// with a 500 (and so indeterminate), while its caller is told, as the
// runner says of a rolled-back failure, that nothing was committed and the
// same key may be sent again. That retry then finds the record that should
// not exist.
type abortCommitsStore struct{ idem.Store }

func (s abortCommitsStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return transact(ctx, s.Store, p, func(ctx context.Context, tx any) idem.TxOutcome {
		out := run(ctx, tx)
		if out.Abort {
			out = idem.TxOutcome{Result: idem.CompleteParams{
				Status: http.StatusInternalServerError, Body: []byte(`{}`),
				Finish: idem.FinishParams{Outcome: idem.OutcomeFailed, Code: idem.CodeExecutionFailed, Attempts: 1},
			}}
		}
		return out
	})
}
