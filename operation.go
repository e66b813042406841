package idem

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ApprovalMode says when an operation needs a human approval.
type ApprovalMode string

// The approval modes of SPEC §3.
const (
	ApprovalNone   ApprovalMode = "none"
	ApprovalAlways ApprovalMode = "always"
	ApprovalPolicy ApprovalMode = "policy"
)

// Surface is a place an operation is exposed.
type Surface string

// The surfaces.
const (
	SurfaceCLI  Surface = "cli"
	SurfaceHTTP Surface = "http"
	SurfaceMCP  Surface = "mcp"
)

// Defaults of SPEC §3.
const (
	DefaultTimeout   = 30 * time.Second
	DefaultBackoffMs = 250
)

// RuntimeRetry configures runtime retries of the handler inside one
// execution (SPEC §7).
type RuntimeRetry struct {
	// MaxAttempts counts retries after the first attempt.
	MaxAttempts int `json:"maxAttempts"`
	BackoffMs   int `json:"backoffMs"`
	// RetryOn, if set, can veto a retry of an otherwise retryable error.
	RetryOn func(error) bool `json:"-"`
}

// DeclaredError is a business outcome a handler may return.
type DeclaredError struct {
	Code    Code   `json:"code"`
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// Declare returns the declared error for code, with the status the code
// table gives it.
func Declare(code Code, message string) DeclaredError {
	return DeclaredError{Code: code, Status: code.Info().Status, Message: message}
}

// Metadata is what an operation declares about itself, apart from its Go
// types and handler: everything the catalog publishes but the schemas.
type Metadata struct {
	Name         string          `json:"name"`
	Method       string          `json:"method"`
	Path         string          `json:"path"`
	Summary      string          `json:"summary"`
	SideEffect   SideEffect      `json:"sideEffect"`
	Idempotent   bool            `json:"idempotent"`
	Timeout      time.Duration   `json:"-"`
	RuntimeRetry RuntimeRetry    `json:"runtimeRetry"`
	Retry        RetryContract   `json:"retry"`
	Approval     ApprovalMode    `json:"approval"`
	Surfaces     []Surface       `json:"surfaces"`
	Errors       []DeclaredError `json:"errors"`
	// SuccessStatus is the HTTP status of a successful result (200); a
	// handler may choose another with Call.SetStatus.
	SuccessStatus int `json:"-"`
	// Location says that the handler sets a Location header on its
	// successful answers (Call.Header), as a create does: the OpenAPI
	// document declares it. A replay carries the original's.
	Location bool `json:"-"`
}

var operationName = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

// WithDefaults fills the defaults of SPEC §3 and §4.
func (m Metadata) WithDefaults() Metadata {
	m.Method = strings.ToUpper(m.Method)
	if m.Timeout == 0 {
		m.Timeout = DefaultTimeout
	}
	if m.RuntimeRetry.BackoffMs == 0 {
		m.RuntimeRetry.BackoffMs = DefaultBackoffMs
	}
	if m.Retry.Kind == "" {
		if kind, ok := DeriveRetryKind(m.SideEffect); ok {
			m.Retry.Kind = kind
		}
	}
	m.Retry = m.Retry.WithDefaults()
	if m.Approval == "" {
		m.Approval = ApprovalNone
	}
	if m.Surfaces == nil {
		m.Surfaces = []Surface{SurfaceCLI, SurfaceHTTP, SurfaceMCP}
	}
	if m.Errors == nil {
		m.Errors = []DeclaredError{}
	}
	if m.SuccessStatus == 0 {
		m.SuccessStatus = 200
	}
	return m
}

// Validate checks the rules of SPEC §3 that concern one operation alone;
// rules across operations (unique names and routes, reconcile targets)
// belong to the registry. Errors name the operation and the rule.
func (m Metadata) Validate() error {
	if !operationName.MatchString(m.Name) {
		return fmt.Errorf("operation %q: name must be dotted lower case, like business.create", m.Name)
	}
	return m.validateContract()
}

// validateContract is Validate without the name rule, which raw
// operations have their own of (DefineRaw).
func (m Metadata) validateContract() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("operation %q: %s", m.Name, fmt.Sprintf(format, args...))
	}
	if m.Method == "" || !strings.HasPrefix(m.Path, "/") {
		return fail("route needs a method and a path starting with /")
	}
	if m.Summary == "" {
		return fail("summary is required")
	}
	if !m.SideEffect.Valid() {
		return fail("side effect %q is not one of none, read, write, destructive, external", m.SideEffect)
	}
	if m.Retry.Kind == "" {
		return fail("a %s operation must declare its retry contract kind", m.SideEffect)
	}
	if err := m.Retry.Validate(m.SideEffect); err != nil {
		return fail("%v", err)
	}
	if m.RuntimeRetry.MaxAttempts < 0 || m.RuntimeRetry.BackoffMs < 0 || m.Timeout < 0 {
		return fail("runtime retry and timeout must not be negative")
	}
	if m.RuntimeRetry.MaxAttempts > 0 && m.SideEffect.Writes() && !m.Idempotent {
		return fail("runtime retry on a %s operation needs idempotent: true", m.SideEffect)
	}
	if m.RuntimeRetry.MaxAttempts > 0 && m.Retry.Transactional {
		return fail("runtime retry on a transactional operation: a failed attempt leaves nothing and frees its key, so the caller retries it (set runtimeRetry.maxAttempts to 0)")
	}
	switch m.Approval {
	case ApprovalNone, ApprovalAlways, ApprovalPolicy:
	default:
		return fail("approval %q is not one of none, always, policy", m.Approval)
	}
	if m.SuccessStatus < 200 || m.SuccessStatus > 299 {
		return fail("success status %d is not a 2xx", m.SuccessStatus)
	}
	for _, s := range m.Surfaces {
		if s != SurfaceCLI && s != SurfaceHTTP && s != SurfaceMCP {
			return fail("surface %q is not one of cli, http, mcp", s)
		}
	}
	return nil
}

// Lease is how long an in-flight record of this operation may stay in
// flight before it reads as indeterminate: the execution's own bound plus
// grace.
func (m Metadata) Lease(grace time.Duration) time.Duration {
	return ExecutionBound(m.Timeout, m.RuntimeRetry.MaxAttempts, m.RuntimeRetry.BackoffMs) + grace
}

// ExecutionBound is the longest one execution may run: its timeout per
// attempt times its attempts (the first and maxAttempts retries), plus the
// longest backoff before each retry. It is the one home of that rule: the
// lease, the shutdown bound and the Go client's wait derive from it.
func ExecutionBound(timeout time.Duration, maxAttempts, backoffMs int) time.Duration {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	bound := time.Duration(maxAttempts+1) * timeout
	for i := 1; i <= maxAttempts; i++ {
		bound += MaxBackoff(backoffMs, i)
	}
	return bound
}

// MaxBackoffCap bounds one backoff wait.
const MaxBackoffCap = 10 * time.Second

// MaxBackoff is the longest wait before retry number n (1-based):
// exponential from backoffMs, capped at MaxBackoffCap. Jittered waits are
// drawn at or below it.
func MaxBackoff(backoffMs, n int) time.Duration {
	d := time.Duration(backoffMs) * time.Millisecond
	for i := 1; i < n && d < MaxBackoffCap; i++ {
		d *= 2
	}
	return min(d, MaxBackoffCap)
}
