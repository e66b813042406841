package idem

import (
	"encoding/json"
	"fmt"
)

// SideEffect classifies what an operation does to the world.
type SideEffect string

// The side-effect classes of SPEC §3.
const (
	SideEffectNone        SideEffect = "none"
	SideEffectRead        SideEffect = "read"
	SideEffectWrite       SideEffect = "write"
	SideEffectDestructive SideEffect = "destructive"
	SideEffectExternal    SideEffect = "external"
)

// Valid reports whether s is one of the declared classes.
func (s SideEffect) Valid() bool {
	switch s {
	case SideEffectNone, SideEffectRead, SideEffectWrite, SideEffectDestructive, SideEffectExternal:
		return true
	}
	return false
}

// Writes reports whether s changes state (write, destructive or external).
func (s SideEffect) Writes() bool {
	return s == SideEffectWrite || s == SideEffectDestructive || s == SideEffectExternal
}

// RetryKind states what a retry of an operation means for its caller (SPEC §4).
type RetryKind string

// The retry contract kinds.
const (
	RetryFreshRead        RetryKind = "fresh_read"
	RetrySameKeyReplay    RetryKind = "same_key_replay"
	RetryConvergent       RetryKind = "convergent"
	RetryIntrinsicReplay  RetryKind = "intrinsic_replay"
	RetryNoAutomaticRetry RetryKind = "no_automatic_retry"
	RetryPreview          RetryKind = "preview"
)

// Enforcement names what actually supplies a retry's safety.
type Enforcement string

// The enforcement mechanisms.
const (
	EnforceFreshRead                 Enforcement = "fresh_read"
	EnforceResourceIdentity          Enforcement = "resource_identity"
	EnforceIdempotencyReservation    Enforcement = "idempotency_reservation"
	EnforceTransactionalSecretReplay Enforcement = "transactional_secret_replay"
	EnforceServerDerivedTransition   Enforcement = "server_derived_transition"
	EnforceNone                      Enforcement = "none"
)

// ResponseSemantics makes the freshness of an answer explicit.
type ResponseSemantics string

// The response semantics.
const (
	SemanticsCurrentState          ResponseSemantics = "current_state"
	SemanticsOriginalAttemptResult ResponseSemantics = "original_attempt_result"
	SemanticsPointInTime           ResponseSemantics = "point_in_time"
	SemanticsPreview               ResponseSemantics = "preview"
)

// DefaultSecretReplayWindowMs is how long a one-time secret result can be
// replayed (SPEC §6.5).
const DefaultSecretReplayWindowMs = 900000

// RetryContract is an operation's retry contract: the catalog's "retry"
// object (SPEC §4). Its JSON form is part of the wire contract.
type RetryContract struct {
	Kind              RetryKind         `json:"kind"`
	KeyRequired       bool              `json:"keyRequired"`
	Enforcement       Enforcement       `json:"enforcement"`
	ResponseSemantics ResponseSemantics `json:"responseSemantics"`
	// Reconcile names the read operation to run before reporting current
	// state; empty (null on the wire) for fresh_read, preview and
	// no_automatic_retry.
	Reconcile string `json:"-"`
	Rationale string `json:"rationale"`
	Preview   bool   `json:"preview"`
	// SecretReplayWindowMs is set only for transactional_secret_replay.
	SecretReplayWindowMs int64 `json:"-"`
	// Transactional declares that the operation's effects live in the
	// store's own database (SPEC §6.7): its handler writes through the
	// store's transaction (sqlitestore.Tx, pgstore.Tx), and the
	// reservation, those writes, the completion and the audit events
	// commit together. A failure before that commit leaves nothing, so its
	// answer is retryable and the key is not consumed.
	Transactional bool `json:"-"`
}

// UsesKey reports whether calls carry an idempotency key (same_key_replay).
func (c RetryContract) UsesKey() bool { return c.Kind == RetrySameKeyReplay }

// defaults per kind: enforcement and response semantics where the kind fixes
// them.
var kindDefaults = map[RetryKind]struct {
	enforcement Enforcement
	semantics   ResponseSemantics
}{
	RetryFreshRead:        {EnforceFreshRead, SemanticsCurrentState},
	RetrySameKeyReplay:    {EnforceIdempotencyReservation, SemanticsOriginalAttemptResult},
	RetryConvergent:       {EnforceResourceIdentity, SemanticsCurrentState},
	RetryIntrinsicReplay:  {EnforceServerDerivedTransition, SemanticsCurrentState},
	RetryNoAutomaticRetry: {EnforceNone, SemanticsPointInTime},
	RetryPreview:          {EnforceNone, SemanticsPreview},
}

// WithDefaults fills what the kind determines: keyRequired, enforcement and
// response semantics when unset, and the secret window for
// transactional_secret_replay.
func (c RetryContract) WithDefaults() RetryContract {
	d, ok := kindDefaults[c.Kind]
	if !ok {
		return c
	}
	c.KeyRequired = c.Kind == RetrySameKeyReplay
	if c.Enforcement == "" {
		c.Enforcement = d.enforcement
	}
	if c.ResponseSemantics == "" {
		c.ResponseSemantics = d.semantics
	}
	if c.Enforcement == EnforceTransactionalSecretReplay && c.SecretReplayWindowMs == 0 {
		c.SecretReplayWindowMs = DefaultSecretReplayWindowMs
	}
	return c
}

// Validate checks the contract on its own and against the operation's side
// effect; reconcile names are checked by the registry, which knows them.
func (c RetryContract) Validate(effect SideEffect) error {
	if _, ok := kindDefaults[c.Kind]; !ok {
		return fmt.Errorf("retry kind %q is not one of fresh_read, same_key_replay, convergent, intrinsic_replay, no_automatic_retry, preview", c.Kind)
	}
	switch {
	case c.Kind == RetrySameKeyReplay && !effect.Writes():
		return fmt.Errorf("same_key_replay on a %q operation: only writing operations replay by key", effect)
	case c.Kind == RetryFreshRead && effect.Writes():
		return fmt.Errorf("fresh_read on a %q operation: a writing operation is never a fresh read", effect)
	}
	needsReconcile := c.Kind != RetryFreshRead && c.Kind != RetryPreview && c.Kind != RetryNoAutomaticRetry
	if needsReconcile && c.Reconcile == "" {
		return fmt.Errorf("retry kind %s needs a reconcile read operation", c.Kind)
	}
	if !needsReconcile && c.Reconcile != "" {
		return fmt.Errorf("retry kind %s takes no reconcile operation (got %q)", c.Kind, c.Reconcile)
	}
	if c.SecretReplayWindowMs != 0 && c.Enforcement != EnforceTransactionalSecretReplay {
		return fmt.Errorf("secretReplayWindowMs is only for transactional_secret_replay")
	}
	if c.Enforcement == EnforceTransactionalSecretReplay && c.Kind != RetrySameKeyReplay {
		return fmt.Errorf("transactional_secret_replay needs retry kind same_key_replay")
	}
	if c.Transactional && effect != SideEffectWrite && effect != SideEffectDestructive {
		return fmt.Errorf("transactional on a %q operation: only write and destructive operations keep their effects in the store's database", effect)
	}
	return nil
}

// DeriveRetryKind returns the contract kind a side effect implies when it is
// unambiguous: fresh_read for none and read. Writing operations must state
// their kind.
func DeriveRetryKind(effect SideEffect) (RetryKind, bool) {
	if effect == SideEffectNone || effect == SideEffectRead {
		return RetryFreshRead, true
	}
	return "", false
}

// retryContractJSON fixes the wire order and the null/absent rules of the
// retry object.
type retryContractJSON struct {
	Kind                 RetryKind         `json:"kind"`
	KeyRequired          bool              `json:"keyRequired"`
	Enforcement          Enforcement       `json:"enforcement"`
	ResponseSemantics    ResponseSemantics `json:"responseSemantics"`
	Reconcile            *string           `json:"reconcile"`
	Rationale            string            `json:"rationale"`
	Preview              bool              `json:"preview"`
	Transactional        bool              `json:"transactional"`
	SecretReplayWindowMs *int64            `json:"secretReplayWindowMs,omitempty"`
}

// MarshalJSON writes reconcile as null when empty and secretReplayWindowMs
// only for transactional_secret_replay.
func (c RetryContract) MarshalJSON() ([]byte, error) {
	out := retryContractJSON{
		Kind: c.Kind, KeyRequired: c.KeyRequired, Enforcement: c.Enforcement,
		ResponseSemantics: c.ResponseSemantics, Rationale: c.Rationale, Preview: c.Preview,
		Transactional: c.Transactional,
	}
	if c.Reconcile != "" {
		out.Reconcile = &c.Reconcile
	}
	if c.SecretReplayWindowMs != 0 {
		out.SecretReplayWindowMs = &c.SecretReplayWindowMs
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the wire form written by MarshalJSON.
func (c *RetryContract) UnmarshalJSON(data []byte) error {
	var in retryContractJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*c = RetryContract{
		Kind: in.Kind, KeyRequired: in.KeyRequired, Enforcement: in.Enforcement,
		ResponseSemantics: in.ResponseSemantics, Rationale: in.Rationale, Preview: in.Preview,
		Transactional: in.Transactional,
	}
	if in.Reconcile != nil {
		c.Reconcile = *in.Reconcile
	}
	if in.SecretReplayWindowMs != nil {
		c.SecretReplayWindowMs = *in.SecretReplayWindowMs
	}
	return nil
}
