package idem

import (
	"net/http"
	"time"
)

// AttemptState is the state of an attempt record (SPEC §6.3).
type AttemptState string

// The attempt states. Forgotten records are deleted, so they have no state.
const (
	AttemptInFlight      AttemptState = "in_flight"
	AttemptCompleted     AttemptState = "completed"
	AttemptIndeterminate AttemptState = "indeterminate"
	// AttemptExpired is the tombstone of a secret result past its window.
	AttemptExpired AttemptState = "expired"
)

// ReplayedHeaders is the allow-list of original response headers a replay
// repeats. Set-Cookie never is.
var ReplayedHeaders = []string{"Content-Type", "Location", "ETag"}

// Attempt is the record a store keeps for one (scope, key).
type Attempt struct {
	Scope       Scope
	Key         string
	Operation   string
	Fingerprint string
	// FingerprintVersion is the version of the preimage Fingerprint was
	// made with (canonical.FingerprintVersion when it was made); 0 for a
	// record made before versions were stored. A retry is judged by it
	// (SPEC §6.2).
	FingerprintVersion int
	State              AttemptState
	ExecutionID        string
	// FencingToken identifies the reservation; only its holder completes.
	FencingToken int64
	// LeaseExpiresAt bounds the in-flight state: past it, a record still in
	// flight is indeterminate (LeasePassed).
	LeaseExpiresAt time.Time
	// Status is the stored HTTP status; 0 while in flight or when
	// indeterminate by lease.
	Status int
	// Headers holds the allow-listed original headers.
	Headers http.Header
	// Body is the stored response body; for a secret result it is the
	// ciphertext (SealedKeyID names the key); nil once a secret expired.
	Body        []byte
	SealedKeyID string
	// Attempts is how many attempts the execution made, once final (a
	// raw operation's replay reports it, as a typed one's stored envelope
	// does).
	Attempts    int
	CreatedAt   time.Time
	CompletedAt time.Time
	// ExpiresAt is when the record is forgotten (retention).
	ExpiresAt time.Time
	// SecretExpiresAt is set for secret results: when the ciphertext is
	// destroyed and the record becomes a tombstone.
	SecretExpiresAt time.Time
	// ObservedAt is when the store read the record, by the store's clock
	// (Observe sets it): with ExpiresAt it says how long the record has
	// left whatever this instance's own clock says (the replay cache).
	ObservedAt time.Time
}

// Observe returns the record as a reader at now must see it, applying the
// transitions that time alone makes and that need no write: a secret past
// its window is an expired tombstone with no body. Stores return every
// record through Observe, so both stores and every instance read
// time-driven states the same way.
//
// A lease that passed is not among them: it must be made durable before
// anyone is told (LeasePassed).
func (a Attempt) Observe(now time.Time) Attempt {
	a.ObservedAt = now
	if a.State == AttemptCompleted && a.SealedKeyID != "" && !a.SecretExpiresAt.IsZero() && !now.Before(a.SecretExpiresAt) {
		a.State = AttemptExpired
		a.Body = nil
	}
	if a.State == AttemptExpired {
		a.Body = nil
	}
	return a
}

// LeasePassed reports whether the record is in flight past its lease at
// now: its executor died or is cut off, and the record is indeterminate.
// A store that reads such a record first marks it indeterminate with a
// write conditional on its fencing token and lease, which waits for any
// fenced effect in progress (pgstore.CheckFence holds the record's row
// lock until its transaction ends), and answers what that write leaves:
// so an effect either committed before the record reads indeterminate, or
// its fence check fails. Until the write can be made, the record answers
// as still in flight.
func (a Attempt) LeasePassed(now time.Time) bool {
	return a.State == AttemptInFlight && !now.Before(a.LeaseExpiresAt)
}

// Forgotten reports whether retention has passed: the record no longer
// exists for readers and its key may start a new attempt. A record in
// flight within its lease is never forgotten, whatever its retention: its
// executor may still be running (SPEC §6.8).
func (a Attempt) Forgotten(now time.Time) bool {
	return !now.Before(a.ExpiresAt) && !(a.State == AttemptInFlight && now.Before(a.LeaseExpiresAt))
}

// FinalState is the state a completion with this HTTP status leaves: any
// 5xx after the handler started, and a cancellation (499) after it started,
// is indeterminate, never a replayable result.
func FinalState(status int) AttemptState {
	if status >= 500 || status == StatusClientClosedRequest {
		return AttemptIndeterminate
	}
	return AttemptCompleted
}

// AttemptView is the wire form of an attempt record (SPEC §10.1).
type AttemptView struct {
	Key             string       `json:"key"`
	Operation       string       `json:"operation"`
	State           AttemptState `json:"state"`
	Fingerprint     string       `json:"fingerprint"`
	ExecutionID     string       `json:"executionId"`
	Status          *int         `json:"status"`
	CreatedAt       time.Time    `json:"createdAt"`
	CompletedAt     *time.Time   `json:"completedAt"`
	ExpiresAt       time.Time    `json:"expiresAt"`
	SecretExpiresAt *time.Time   `json:"secretExpiresAt,omitempty"`
}
