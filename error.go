package idem

import (
	"errors"
	"fmt"
)

// Error is the one error type of idem: an application code from SPEC.md with
// its HTTP status, whether repeating the same request may succeed, a message
// that tells the caller what to do, and optional structured details.
//
// Surfaces translate an Error to their wire form in exactly one place each
// (problem+json over HTTP, a tool error over MCP, an exit code in the CLI).
type Error struct {
	Code      Code
	Status    int
	Message   string
	Retryable bool
	Details   map[string]any
	// Err is the underlying cause, if any; it is never shown to callers.
	Err error
}

// Errorf returns an Error with code's status and retryability and a formatted
// message.
func Errorf(code Code, format string, args ...any) *Error {
	info := code.Info()
	return &Error{Code: code, Status: info.Status, Retryable: info.Retryable, Message: fmt.Sprintf(format, args...)}
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, idem.ErrStoreUnavailable) matches any STORE_UNAVAILABLE.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// WithDetail returns a copy of e with details[key] = value.
func (e *Error) WithDetail(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details[key] = value
	return &c
}

// ErrorCode returns the code of err, CodeInternal for an error that is not an
// *Error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// AsError returns err as an *Error, wrapping anything unknown as INTERNAL
// (the cause kept in Err, the message generic).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	out := Errorf(CodeInternal, "internal error; the request may be retried later")
	out.Err = err
	return out
}

// Unavailable wraps a store failure as STORE_UNAVAILABLE. Stores return it
// for every failure they cannot interpret, so that the pipeline fails closed;
// handlers may return it for their own database. Its message says nothing
// of what ran: the pipeline adds that where it knows (nothing, before the
// handler started; maybe something, after).
func Unavailable(op string, cause error) *Error {
	e := Errorf(CodeStoreUnavailable, "the store is unavailable (%s)", op)
	e.Err = cause
	return e
}

// Sentinel errors for errors.Is. They compare by code only.
var (
	// ErrStoreUnavailable matches every STORE_UNAVAILABLE error.
	ErrStoreUnavailable = &Error{Code: CodeStoreUnavailable}
	// ErrNotFound matches NOT_FOUND errors returned by stores for unknown rows.
	ErrNotFound = &Error{Code: CodeNotFound}
	// ErrFenced is returned by Store.Complete when the record is no longer
	// held by the caller's fencing token: it was never reserved with that
	// token, its lease passed, or it is already final.
	ErrFenced = errors.New("idem: attempt record not held by this fencing token")
	// ErrApprovalNotConsumable is returned when a reservation or execution
	// start names an approval that is no longer approved and unexpired
	// (consumed concurrently, expired, or never approved). Nothing is stored.
	ErrApprovalNotConsumable = errors.New("idem: approval is not approved and unconsumed")
	// ErrKeyBusy is returned by Transactor.Transact when a transactional
	// execution of the same key holds it now, uncommitted: nothing was
	// read or written, and the caller answers in flight at once rather
	// than wait behind the open transaction.
	ErrKeyBusy = errors.New("idem: a transactional execution of this idempotency key is running")
	// ErrAttemptExists matches the *AttemptExistsError that
	// Store.RequestApproval returns for a key that already has a record.
	ErrAttemptExists = errors.New("idem: the idempotency key already has an attempt record")
)

// AttemptExistsError is Store.RequestApproval's answer to a keyed request
// whose (scope, key) already has an attempt record within retention:
// nothing was created, and the caller answers from Attempt as stage 5 does
// (replay, in flight, indeterminate, expired or reuse).
type AttemptExistsError struct{ Attempt Attempt }

func (e *AttemptExistsError) Error() string {
	return fmt.Sprintf("idem: idempotency key %q already has an attempt record", e.Attempt.Key)
}

// Unwrap makes errors.Is(err, ErrAttemptExists) match.
func (e *AttemptExistsError) Unwrap() error { return ErrAttemptExists }

// retryable marks a handler error as safe to retry.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }

func (r retryable) Unwrap() error { return r.err }

// Retryable marks err as transient: the runtime may retry the attempt when
// the operation allows runtime retries (SPEC §7).
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return retryable{err}
}

// IsRetryable reports whether err was marked with Retryable.
func IsRetryable(err error) bool {
	var r retryable
	return errors.As(err, &r)
}

// maxListedErrors bounds details.errors, so that a body with an error in
// each of its many items answers a bounded problem object, not one larger
// than the body.
const maxListedErrors = 100

// InvalidInput is the INVALID_INPUT error of problems, each {path,
// message}: the first in its message, at most maxListedErrors in
// details.errors.
func InvalidInput(problems []map[string]string) *Error {
	return InvalidInputOf(problems, len(problems))
}

// InvalidInputOf is InvalidInput of the first of total problems, when the
// rest were counted but not listed.
func InvalidInputOf(problems []map[string]string, total int) *Error {
	msg := problems[0]["message"]
	if p := problems[0]["path"]; p != "" {
		msg = p + ": " + msg
	}
	switch n := max(total, len(problems)); {
	case n > maxListedErrors:
		msg += fmt.Sprintf(" (and %d more; details.errors lists the first %d)", n-1, maxListedErrors)
		problems = problems[:min(len(problems), maxListedErrors)]
	case n > 1:
		msg += fmt.Sprintf(" (and %d more in details.errors)", n-1)
	}
	return Errorf(CodeInvalidInput, "invalid input: %s", msg).WithDetail("errors", problems)
}
