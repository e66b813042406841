package idem

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Store keeps attempt records, approvals, executions and their audit events,
// all in one database. Implementations: sqlitestore (embedded default) and
// pgstore (several instances sharing PostgreSQL); both pass the conformance
// suite in storetest.
//
// It is split by concern: AttemptStore (the records of keyed requests),
// ExecutionStore (executions and their audit events), ApprovalStore and
// MaintenanceStore (sweeping, readiness, closing). A caller that needs one
// concern can take the small interface; the runner and the decorators take
// Store. Optional abilities are separate interfaces found by type
// assertion: CompletionFeed and Transactor.
//
// Every method is one transaction, takes its arguments (besides ctx) in
// one value and returns one result with its error. Params are plain
// values and results are per call, so an implementation may batch
// concurrent calls into one transaction (group commit) without callers
// noticing.
//
// Errors: rows that do not exist are NOT_FOUND (errors.Is(err,
// ErrNotFound)) or the code a method names; a statement the database
// refused for its data (a NUL in text, a constraint no statement handles)
// is INTERNAL, a bug and not an outage; any other failure the store cannot
// interpret is STORE_UNAVAILABLE (errors.Is(err, ErrStoreUnavailable)), so
// callers fail closed; a cancelled or expired ctx comes back as ctx.Err().
// Stores read time only from their clock (StoreConfig.Clock), and return
// attempts and approvals as Observed at that time; an attempt read in
// flight past its lease is first made indeterminate durably
// (Attempt.LeasePassed).
type Store interface {
	AttemptStore
	ExecutionStore
	ApprovalStore
	MaintenanceStore
}

// AttemptStore keeps the attempt records of keyed requests: one per
// (scope, key), reserved, completed under its fencing token, read back.
type AttemptStore interface {
	// Reserve takes the attempt record for (scope, key) if there is none
	// (or only a forgotten one), and in the same transaction consumes
	// ApprovalID if set, creates the execution and appends its
	// execution.started event. If a record exists, nothing is written and
	// it is returned with Reserved false, whatever its fingerprint: the
	// caller answers replay, in flight, indeterminate, expired or reuse.
	// An approval that is no longer consumable fails the whole call with
	// ErrApprovalNotConsumable.
	Reserve(ctx context.Context, p ReserveParams) (ReserveResult, error)

	// Complete stores the final result of a reservation and finishes its
	// execution, in one transaction. The record must still be in flight
	// under p.FencingToken with its lease not passed, else ErrFenced and
	// nothing is written. A status of 500 or more leaves the record
	// indeterminate (FinalState); anything else completed and replayable.
	Complete(ctx context.Context, p CompleteParams) (Attempt, error)

	// Release removes a reservation whose execution provably had no
	// effect (its handler's error was NotDispatched: the request never
	// left the process), so that the key may be sent again, and finishes
	// the execution, giving back the approval it consumed when
	// p.Finish.ReturnApproval names it, in one transaction. The record
	// must still be in flight under p.FencingToken with its lease not
	// passed, else ErrFenced and nothing is written.
	Release(ctx context.Context, p ReleaseParams) error

	// GetAttempt returns the record for (p.Scope, p.Key); NOT_FOUND when
	// there is none or it is forgotten.
	GetAttempt(ctx context.Context, p GetAttemptParams) (Attempt, error)

	// LeaseLeft returns how long the lease of reservation f has left, by
	// the store's clock (0 once it has passed); ErrFenced when the record
	// is no longer in flight under f.FencingToken. The runner asks it
	// before every runtime retry.
	LeaseLeft(ctx context.Context, f Fence) (time.Duration, error)
}

// ExecutionStore keeps executions and their audit events. Keyed executions
// start and finish with their attempt record (AttemptStore.Reserve and
// Complete); the methods here start unkeyed ones, finish any, append to
// them and read them.
type ExecutionStore interface {
	// StartExecution creates an unkeyed execution and its execution.started
	// event, consuming ApprovalID in the same transaction if set.
	StartExecution(ctx context.Context, p StartParams) (Execution, error)

	// FinishExecution records an execution's outcome and final events
	// (used for unkeyed executions, and for keyed ones whose Complete was
	// fenced), giving back the approval it consumed when
	// p.ReturnApproval names it.
	FinishExecution(ctx context.Context, p FinishParams) error

	// AppendEvents adds audit events to an existing execution of p.Org.
	AppendEvents(ctx context.Context, p AppendEventsParams) error

	// GetExecution returns an execution of p.Org with its events in order;
	// NOT_FOUND for an unknown id or another org's.
	GetExecution(ctx context.Context, p GetExecutionParams) (Execution, error)

	// ListExecutions returns executions of an org, newest first, without
	// their events.
	ListExecutions(ctx context.Context, p ListExecutionsParams) ([]Execution, error)

	// RecordExecutions stores executions that already finished, each as
	// it started and finished, in one transaction: the runner records
	// fresh reads with it after their answer (their audit, off the
	// request path). Each links to the most recent earlier execution of
	// its intent, the ones before it in p included. Nothing is written
	// when an id exists already.
	RecordExecutions(ctx context.Context, p RecordExecutionsParams) error
}

// ApprovalStore keeps approvals: requested once per intent, decided, read,
// and consumed by the execution they authorize (in Reserve or
// StartExecution).
type ApprovalStore interface {
	// RequestApproval returns the live approval of the intent (operation,
	// requester, fingerprint) if there is one (pending, approved or
	// rejected, not past its expiry), and otherwise creates a pending one
	// with p.ID; Created tells which. Concurrent requests for one intent
	// share one approval.
	//
	// When p.Key is set, the same transaction first reads the attempt
	// record of (Org, RequestedBy, Key), serialised with Reserve of that
	// key: if there is one within retention, nothing is read or created
	// and err is an *AttemptExistsError carrying it (errors.Is(err,
	// ErrAttemptExists)). So a same-key request that raced the execution
	// its approval authorized is answered from that execution's record,
	// never with a new approval request.
	RequestApproval(ctx context.Context, p RequestApprovalParams) (RequestApprovalResult, error)

	// GetApproval returns an approval of p.Org; APPROVAL_NOT_FOUND for an
	// unknown id or another org's.
	GetApproval(ctx context.Context, p GetApprovalParams) (Approval, error)

	// ListApprovals returns approvals of an org, newest first.
	ListApprovals(ctx context.Context, p ListApprovalsParams) ([]Approval, error)

	// DecideApproval applies a decision atomically under Approval.Decide's
	// rules and returns the approval as it stands after it.
	// APPROVAL_NOT_FOUND for an unknown id or another org's. Who may decide
	// is checked by the caller before.
	DecideApproval(ctx context.Context, p DecideApprovalParams) (Approval, error)
}

// MaintenanceStore is the store's upkeep and lifecycle.
type MaintenanceStore interface {
	// Sweep does one bounded round of maintenance: forgets records past
	// retention, destroys secret ciphertexts past their window (leaving
	// tombstones), marks in-flight records past their lease indeterminate
	// and pending or approved approvals past expiry expired, and removes
	// executions and their audit events past p.AuditRetention. Safe to run
	// from several instances at once.
	Sweep(ctx context.Context, p SweepParams) (SweepResult, error)

	// Ping checks that the database answers (for readiness probes).
	Ping(ctx context.Context) error

	// Close releases the store's resources.
	Close() error
}

// CompletionFeed is implemented by stores that can tell every instance
// when a record is completed on any instance (pgstore: LISTEN/NOTIFY), so
// that Prefer: wait waiters on another instance wake at once instead of at
// their next poll.
type CompletionFeed interface {
	// Completions delivers the keys of records completed from now on, by
	// any instance, until ctx ends or the store closes (then the channel is
	// closed). Delivery is best effort: a slow reader misses keys, and
	// waiters poll as well. A nil channel means the store has no feed.
	Completions(ctx context.Context) <-chan ScopedKey
	// Watch asks that the completion of the in-flight record of (scope,
	// key), on whichever instance, be delivered to the feeds. Only watched
	// records are signalled.
	Watch(ctx context.Context, scope Scope, key string) error
}

// Transactor is implemented by stores that run transactional operations
// (SPEC §6.7, RetryContract.Transactional): sqlitestore and pgstore. The
// runner refuses to register a transactional operation on a store without
// it.
type Transactor interface {
	// Transact runs one transactional execution in one transaction. It
	// reserves p.Key as Reserve does (unkeyed, when p.Key is empty, it
	// starts the execution as StartExecution does), consuming the
	// approval; calls run with the transaction; then
	// stores what run returns, as Complete does (unkeyed: as
	// FinishExecution does), and commits. One commit for everything.
	//
	// When the key has a record, run is not called, nothing is written and
	// the record comes back with Reserved false, as from Reserve. When a
	// transactional execution of the key is running now (uncommitted), run
	// is not called and the error is ErrKeyBusy, at once; never while the
	// key has a final record (another same-key call that only reads it
	// does not make the key busy). When run asks for
	// Abort, the whole transaction is rolled back: the result is Reserved
	// and not Committed, and nothing of the call remains (no record, no
	// execution, no effect). With Undo, only the handler's writes are
	// undone before the outcome is stored (rolled back to a savepoint,
	// or with the whole transaction, the call's own part then written
	// again; should another call take the key in between, the result is
	// as when the key has a record, or ErrKeyBusy).
	//
	// run gets the transaction as the store's own type (*sql.Tx on
	// sqlitestore, pgx.Tx on pgstore) and must not commit, roll back or
	// use it after it returns. An error after run returned without Abort
	// may leave the outcome unknown (a commit cut off): a same-key retry
	// then either replays the committed result or runs afresh.
	Transact(ctx context.Context, p ReserveParams, run TransactFunc) (TransactResult, error)
}

// TransactFunc is the handler stage of a transactional execution: it runs
// inside the store's transaction tx and returns what to store.
type TransactFunc func(ctx context.Context, tx any) TxOutcome

// TxOutcome is how the handler stage of a transactional execution ended.
type TxOutcome struct {
	// Abort rolls the whole transaction back (a failure: 5xx, timeout,
	// cancellation, panic).
	Abort bool
	// Undo rolls back the handler's writes only (a declared business
	// error), then stores Result.
	Undo bool
	// Result is stored as Complete stores it; its Scope, Key and
	// FencingToken are the reservation's and are filled in by the store.
	// Unkeyed, only Result.Finish is used.
	Result CompleteParams
}

// TransactResult is what Transact found or made.
type TransactResult struct {
	// Reserved is set when the key was reserved (or, unkeyed, the
	// execution started) and run was called.
	Reserved bool
	// Committed is set when everything committed.
	Committed bool
	// Attempt is the existing record when not Reserved, and the completed
	// one when Committed (keyed).
	Attempt Attempt
}

// ScopedKey names one attempt record.
type ScopedKey struct {
	Scope Scope
	Key   string
}

// StartParams describes a new execution.
type StartParams struct {
	ExecutionID string
	Scope       Scope
	Operation   string
	// Fingerprint of the request; executions with the same principal,
	// operation and fingerprint are re-invocations of one another.
	Fingerprint string
	// FingerprintVersion is the version of Fingerprint's preimage
	// (canonical.FingerprintVersion), kept with a keyed record
	// (Attempt.FingerprintVersion); 0 stores none.
	FingerprintVersion int
	// ApprovalID, if set, is consumed for this execution in the same
	// transaction. It must be approved, unexpired, unconsumed and bound to
	// this intent (org, requester, operation, fingerprint), else the call
	// fails with ErrApprovalNotConsumable and writes nothing.
	ApprovalID string
}

// ReserveParams describes a reservation of (Scope, Key).
type ReserveParams struct {
	StartParams
	Key string
	// Lease bounds the in-flight state (Metadata.Lease).
	Lease time.Duration
	// Retention is how long the record is kept before it is forgotten.
	Retention time.Duration
}

// ReserveResult is what Reserve found or made.
type ReserveResult struct {
	// Attempt is the new record when Reserved, else the existing one.
	Attempt  Attempt
	Reserved bool
	// Execution is the new execution when Reserved.
	Execution Execution
}

// FinishParams is an execution's end.
type FinishParams struct {
	Org         string
	ExecutionID string
	Outcome     Outcome
	// Code is the failure code; empty on success.
	Code     Code
	Attempts int
	// Events are appended in order; the last is the final event.
	Events []AuditEvent
	// ReturnApproval, when set, names the approval the execution consumed
	// and gives it back, approved and unconsumed as before, in the same
	// transaction: nothing of the execution ran (its handler's error was
	// NotDispatched), and SPEC §8 has an approval consumed only by an
	// execution that starts. Release and FinishExecution honour it; an
	// approval that is not consumed by this execution is left as it is.
	ReturnApproval string
}

// RecordExecutionsParams are finished executions to store, in the order
// they started.
type RecordExecutionsParams struct {
	Executions []FinishedExecution
}

// FinishedExecution is an execution, unkeyed and without an approval, that
// started at StartedAt (Start.ApprovalID unused) and finished with Finish
// at FinishedAt; its execution.started event is the store's to write, at
// StartedAt, before Finish.Events.
type FinishedExecution struct {
	Start      StartParams
	StartedAt  time.Time
	Finish     FinishParams
	FinishedAt time.Time
}

// CompleteParams is the final result of a reservation.
type CompleteParams struct {
	Scope        Scope
	Key          string
	FencingToken int64
	Status       int
	// Headers are filtered to ReplayedHeaders by the store.
	Headers http.Header
	Body    []byte
	// SealedKeyID marks Body as a secret ciphertext sealed with that key;
	// it is destroyed SecretWindow after completion.
	SealedKeyID  string
	SecretWindow time.Duration
	// Finish ends the record's execution; its Org and ExecutionID are
	// taken from the record.
	Finish FinishParams
}

// ReleaseParams names a reservation to remove and ends its execution.
type ReleaseParams struct {
	Fence
	// Finish ends the record's execution; its Org and ExecutionID are
	// taken from the record.
	Finish FinishParams
}

// GetAttemptParams names the attempt record GetAttempt reads.
type GetAttemptParams struct {
	Scope Scope
	Key   string
}

// AppendEventsParams are audit events for existing executions of Org.
type AppendEventsParams struct {
	Org string
	// Events are appended in order.
	Events []AuditEvent
}

// GetExecutionParams names the execution GetExecution reads.
type GetExecutionParams struct {
	Org string
	ID  string
}

// RequestApprovalParams describes an intent that needs approval.
type RequestApprovalParams struct {
	// ID names the approval if one is created.
	ID          string
	Org         string
	RequestedBy string
	// Key is the request's idempotency key; empty for unkeyed calls.
	Key         string
	Operation   string
	Fingerprint string
	// Input is the exact input that will run, shown to approvers.
	Input  json.RawMessage
	Reason string
	Expiry time.Duration
	// Rule names the configured rule that asks for the approval, and
	// ApproverRole the role that may decide it ("": RoleApprover).
	Rule         string
	ApproverRole string
}

// RequestApprovalResult is the approval RequestApproval found or made.
type RequestApprovalResult struct {
	Approval Approval
	// Created is set when the approval was created by this call, not
	// found live.
	Created bool
}

// GetApprovalParams names the approval GetApproval reads.
type GetApprovalParams struct {
	Org string
	ID  string
}

// ListApprovalsParams filters ListApprovals.
type ListApprovalsParams struct {
	Org string
	// RequestedBy, if set, keeps only that principal's requests.
	RequestedBy string
	// Status, if set, keeps only approvals in that (observed) status.
	Status ApprovalStatus
	// Limit caps the result; 0 means 100.
	Limit int
}

// ListExecutionsParams filters ListExecutions; empty fields do not filter.
type ListExecutionsParams struct {
	Org       string
	Principal string
	Operation string
	Outcome   Outcome
	// Limit caps the result; 0 means 100.
	Limit int
}

// DecideApprovalParams is a decision on one approval.
type DecideApprovalParams struct {
	Org      string
	ID       string
	Decision Decision
}

// SweepParams bounds one Sweep.
type SweepParams struct {
	// BatchSize caps the rows each step touches; 0 means 500.
	BatchSize int
	// AuditRetention is how long executions and their audit events are
	// kept, counted from the execution's start; 0 keeps them forever. An
	// execution started longer ago goes with all its events, whatever
	// its outcome: it must not be shorter than the attempt retention
	// (which exceeds the longest lease, CheckRetention), so an execution
	// still running past it is one whose process died. A store removes it
	// in a later round when a round's batch is full, never before the
	// window.
	AuditRetention time.Duration
}

// SweepResult counts what one Sweep did. A count equal to the batch size
// means more may be left.
type SweepResult struct {
	// Forgotten counts records that let their key go past retention.
	Forgotten        int
	SecretsDestroyed int
	LeasesExpired    int
	ApprovalsExpired int
	// ExecutionsRemoved counts executions past the audit retention
	// deleted, and EventsRemoved audit events deleted (those a store keeps
	// in rows of their own; events kept in their execution's record go
	// with it).
	ExecutionsRemoved int
	EventsRemoved     int
}

// Done reports whether the round left nothing behind (every count below
// batch).
func (r SweepResult) Done(batch int) bool {
	return r.Forgotten < batch && r.SecretsDestroyed < batch && r.LeasesExpired < batch && r.ApprovalsExpired < batch &&
		r.ExecutionsRemoved < batch && r.EventsRemoved < batch
}

// StoreConfig is what both stores take besides their connection.
type StoreConfig struct {
	// Clock tells the store the time (tests set a fake one). When nil it
	// is the store's own: the database's clock on PostgreSQL (sampled, so
	// that every instance judges leases by one clock), the system clock on
	// SQLite (SystemClock, one machine).
	Clock Clock
	// ConnectTimeout bounds each connection to a database server, from
	// the dial to its first answer (PostgreSQL; a connect_timeout in the
	// URL wins). Zero waits as long as the context allows.
	ConnectTimeout time.Duration
}

// WithDefaults fills unset fields.
func (c StoreConfig) WithDefaults() StoreConfig {
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	return c
}

// FilterReplayedHeaders keeps only the allow-listed headers of h.
func FilterReplayedHeaders(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range ReplayedHeaders {
		if v := h.Values(name); len(v) > 0 {
			out[name] = append([]string(nil), v...)
		}
	}
	return out
}
