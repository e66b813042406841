package idem

import "time"

// Outcome is where an execution ended.
type Outcome string

// The execution outcomes.
const (
	OutcomeRunning   Outcome = "running"
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
)

// Audit event types (SPEC §7, §13).
const (
	EventStarted          = "execution.started"
	EventRetried          = "execution.retried"
	EventSucceeded        = "execution.succeeded"
	EventFailed           = "execution.failed"
	EventApprovalConsumed = "approval.consumed"
	EventReplayed         = "execution.replayed"
	// EventPolicyDecided is one policy's or configured rule's decision
	// on the call (data: rule, outcome), before it started.
	EventPolicyDecided = "policy.decided"
)

// Execution is one run of the pipeline, with its audit trail. Its JSON form
// is the wire form of SPEC §10.1.
type Execution struct {
	ID          string `json:"id"`
	Org         string `json:"-"`
	Operation   string `json:"operation"`
	Principal   string `json:"principal"`
	Fingerprint string `json:"-"`
	// Key is the caller's idempotency key; empty for unkeyed calls.
	Key            string       `json:"-"`
	Attempts       int          `json:"attempts"`
	Outcome        Outcome      `json:"outcome"`
	Code           *Code        `json:"code"`
	ReinvocationOf *string      `json:"reinvocationOf"`
	StartedAt      time.Time    `json:"startedAt"`
	FinishedAt     *time.Time   `json:"finishedAt"`
	Events         []AuditEvent `json:"events"`
}

// AuditEvent is one entry of an execution's audit trail. It never carries
// raw input or secrets: only the input's fingerprint.
type AuditEvent struct {
	ExecutionID string    `json:"-"`
	Type        string    `json:"type"`
	At          time.Time `json:"at"`
	// Attempt is set on events about one attempt.
	Attempt int `json:"attempt,omitempty"`
	// Code is set on failures; PreviousErrorCode on execution.retried.
	Code              Code `json:"code,omitempty"`
	PreviousErrorCode Code `json:"previousErrorCode,omitempty"`
	// Attempts is set on the final event.
	Attempts   int   `json:"attempts,omitempty"`
	DurationMs int64 `json:"durationMs,omitempty"`
	// Data carries small, non-secret facts (an approval id, a status).
	Data map[string]string `json:"data,omitempty"`
}
