package idem

import (
	"fmt"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
)

// Code is a stable error code from SPEC.md. Codes are part of the wire
// contract: callers branch on them, so they never change. An application
// adds its own business codes with RegisterCodes.
type Code string

// Every code idem itself can produce. docs/errors.md lists them; a test
// keeps it in step with the table below.
const (
	// Request and routing.
	CodeInvalidInput       Code = "INVALID_INPUT"
	CodeNotFound           Code = "NOT_FOUND"
	CodeOperationNotFound  Code = "OPERATION_NOT_FOUND"
	CodeMethodNotAllowed   Code = "METHOD_NOT_ALLOWED"
	CodeUnauthenticated    Code = "UNAUTHENTICATED"
	CodeForbidden          Code = "FORBIDDEN"
	CodeRequestTooLarge    Code = "REQUEST_TOO_LARGE"
	CodeRequestTimeout     Code = "REQUEST_TIMEOUT"
	CodeRateLimited        Code = "RATE_LIMITED"
	CodeDryRunNotSupported Code = "DRY_RUN_NOT_SUPPORTED"

	// Idempotency keys and attempt records.
	CodeIdempotencyKeyInvalid          Code = "IDEMPOTENCY_KEY_INVALID"
	CodeIdempotencyKeyNotSupported     Code = "IDEMPOTENCY_KEY_NOT_SUPPORTED"
	CodeIdempotencyKeyRequired         Code = "IDEMPOTENCY_KEY_REQUIRED"
	CodeIdempotencyKeyReused           Code = "IDEMPOTENCY_KEY_REUSED"
	CodeIdempotencyKeyInFlight         Code = "IDEMPOTENCY_KEY_IN_FLIGHT"
	CodeIdempotencyResultIndeterminate Code = "IDEMPOTENCY_RESULT_INDETERMINATE"
	CodeIdempotencyResultExpired       Code = "IDEMPOTENCY_RESULT_EXPIRED"

	// Policies and approvals.
	CodePolicyDenied           Code = "POLICY_DENIED"
	CodePolicyFailed           Code = "POLICY_FAILED"
	CodeApprovalRequired       Code = "APPROVAL_REQUIRED"
	CodeApprovalRejected       Code = "APPROVAL_REJECTED"
	CodeSelfApprovalForbidden  Code = "SELF_APPROVAL_FORBIDDEN"
	CodeApprovalNotFound       Code = "APPROVAL_NOT_FOUND"
	CodeApprovalAlreadyDecided Code = "APPROVAL_ALREADY_DECIDED"
	CodeApprovalExpired        Code = "APPROVAL_EXPIRED"

	// Execution.
	CodeTimeout         Code = "TIMEOUT"
	CodeCancelled       Code = "CANCELLED"
	CodeExecutionFailed Code = "EXECUTION_FAILED"
	CodeOutputInvalid   Code = "OUTPUT_INVALID"

	// Infrastructure.
	CodeStoreUnavailable Code = "STORE_UNAVAILABLE"
	CodeInternal         Code = "INTERNAL"
	CodeNetworkError     Code = "NETWORK_ERROR"
	// CodeUpstreamUnavailable: idem proxy or idem gateway could not send
	// the request to its upstream at all (SPEC §15, §17).
	CodeUpstreamUnavailable Code = "UPSTREAM_UNAVAILABLE"
)

// CodeInfo is what a code means on the wire.
type CodeInfo struct {
	// Status is the HTTP status; 0 for NETWORK_ERROR, which has no HTTP answer.
	Status int
	// Retryable reports whether repeating the same request unchanged may
	// succeed. A keyed call answered with a 5xx after its handler started is
	// answered with retryable false whatever this says (SPEC §6.4).
	Retryable bool
	// Title is the short, fixed summary used as the problem's title.
	Title string
	// Action tells the caller what to do next.
	Action string
}

var codeTable = map[Code]CodeInfo{
	CodeInvalidInput:       {400, false, "Invalid input", "Fix the fields listed in details.errors and send the request again."},
	CodeNotFound:           {404, false, "Not found", "Check the path and the resource identifiers; the resource or route does not exist for this caller."},
	CodeOperationNotFound:  {404, false, "Operation not found", "Read the operations catalog (GET /v1/operations) for the names exposed on this surface."},
	CodeMethodNotAllowed:   {405, false, "Method not allowed", "Use one of the methods in the Allow header."},
	CodeUnauthenticated:    {401, false, "Unauthenticated", "Send a valid token as Authorization: Bearer <token>."},
	CodeForbidden:          {403, false, "Forbidden", "The caller lacks a role this action needs; ask an administrator or use a principal that has it."},
	CodeRequestTooLarge:    {413, false, "Request too large", "Send a smaller body; the limit is 1 MiB unless the server says otherwise."},
	CodeRequestTimeout:     {408, true, "Request timeout", "The body did not arrive within the server's read timeout and nothing was stored; send the same request again (with the same key)."},
	CodeRateLimited:        {429, true, "Rate limited", "The server is at its admission bound and stored nothing; wait for Retry-After, then send the same request again (with the same key)."},
	CodeDryRunNotSupported: {400, false, "Dry run not supported", "This operation has no preview; remove dryRun=true (check retry.preview in the catalog)."},

	CodeIdempotencyKeyInvalid:          {400, false, "Invalid idempotency key", "Send exactly one Idempotency-Key header of 1 to 255 characters from A-Z a-z 0-9 - _ . ~ : / + = @."},
	CodeIdempotencyKeyNotSupported:     {400, false, "Idempotency key not supported", "Remove the Idempotency-Key header: this operation's retry contract (or dryRun) does not use keys; follow retry.kind in the catalog."},
	CodeIdempotencyKeyRequired:         {400, false, "Idempotency key required", "Generate a new key, record it in durable task state, and send it as Idempotency-Key."},
	CodeIdempotencyKeyReused:           {422, false, "Idempotency key reused", "This key already names a different request; use a new key for a new intent, or resend the original request byte for byte."},
	CodeIdempotencyKeyInFlight:         {409, true, "Request in flight", "The original request with this key is still running; wait for Retry-After (or send Prefer: wait=N) and retry with the same key."},
	CodeIdempotencyResultIndeterminate: {409, false, "Result indeterminate", "Nobody can prove whether the original attempt took effect; run the reconcile operation in details.reconcile and use a new key only if a new mutation is still needed."},
	CodeIdempotencyResultExpired:       {410, false, "Result expired", "The one-time result of this attempt is no longer kept; run the reconcile operation in details.reconcile to find what it created."},

	CodePolicyDenied:           {403, false, "Denied by policy", "A policy forbids this request (see details.reason); change the request or ask an administrator."},
	CodePolicyFailed:           {403, false, "Policy failed", "A policy could not be evaluated, so the request was refused (fail closed); retry later or contact the operator."},
	CodeApprovalRequired:       {403, false, "Approval required", "Ask an approver to approve details.approvalId, then send the same request again."},
	CodeApprovalRejected:       {403, false, "Approval rejected", "An approver rejected this exact request (see details.reason); change the request, or wait until the approval expires to ask again."},
	CodeSelfApprovalForbidden:  {403, false, "Self-approval forbidden", "Another approver must decide this approval; the requester cannot."},
	CodeApprovalNotFound:       {404, false, "Approval not found", "Check the approval id; approvals are visible to their requester and to approvers of the same org."},
	CodeApprovalAlreadyDecided: {409, false, "Approval already decided", "The approval carries another decision; read it with GET /v1/approvals/{id}."},
	CodeApprovalExpired:        {409, false, "Approval expired", "The approval passed its expiry undecided; the requester must send the request again to open a new one."},

	CodeTimeout:         {504, true, "Timeout", "The attempt outlived its timeout; for a keyed call run the reconcile operation first, otherwise retry."},
	CodeCancelled:       {499, false, "Cancelled", "The caller cancelled the execution; for a keyed call run the reconcile operation before deciding anything."},
	CodeExecutionFailed: {500, false, "Execution failed", "The handler failed; for a keyed call the result is indeterminate: run the reconcile operation before retrying with a new key."},
	CodeOutputInvalid:   {500, false, "Invalid output", "The operation produced output that breaks its own schema (a server bug); run the reconcile operation and report it."},

	CodeStoreUnavailable:    {503, true, "Store unavailable", "The server could not reach its store. Before the handler started (retryable: true) nothing ran and the key is not consumed: retry the same request, same key, later. After it started (a keyed call says so, with retryable: false and details.reconcile) the call may have executed: run the reconcile operation first."},
	CodeInternal:            {500, false, "Internal error", "An unexpected server error; for a keyed call run the reconcile operation before retrying."},
	CodeNetworkError:        {0, true, "Network error", "No HTTP answer was received; retry with the same key, or reconcile if retries are exhausted."},
	CodeUpstreamUnavailable: {503, true, "Upstream unavailable", "idem proxy or idem gateway could not reach the API or MCP server it fronts (connection refused or reset before any byte was sent, a kept-alive connection the upstream had already closed both times the request was tried, no MCP session could be made): nothing ran and the key is not consumed; retry the same request, same key, later."},
}

// appCodes holds the codes applications registered (RegisterCodes). It is
// read without a lock wherever a code is looked up, and replaced whole,
// under appCodesMu, by each registration.
var (
	appCodesMu sync.Mutex
	appCodes   atomic.Pointer[map[Code]CodeInfo]
)

// codeForm is what a code looks like: it ends the problem's type URN.
var codeForm = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// RegisterCodes adds an application's own codes — the business outcomes its
// handlers return (Errorf) and its operations declare (Metadata.Errors,
// Declare) — to the code table, so that they are answered like idem's own:
// Errorf and Declare take their status and retryability from info, a
// problem carries their title (NewProblem), and the CLI and the console
// show their action. Call it from the package that owns the codes before
// their operations are defined; an init function is the usual place:
//
//	const CodeBusinessExists idem.Code = "BUSINESS_EXISTS"
//
//	func init() {
//		idem.RegisterCodes(map[idem.Code]idem.CodeInfo{
//			CodeBusinessExists: {Status: 409, Title: "Business exists",
//				Action: "Choose another slug, or use business.show."},
//		})
//	}
//
// A code is upper-case letters, digits and underscores, starting with a
// letter; its Status is a 4xx or 5xx, and its Title and Action are not
// empty. RegisterCodes panics, registering none of codes, when one breaks
// these rules, is one of idem's own (Codes), or is registered already with
// other information; registering the same information again does nothing.
// Codes does not list registered codes: the application documents its own
// (docs/demo.md lists the reference application's).
//
// A code nobody registered still travels in an Error whose Status is set,
// but Errorf and Declare give it INTERNAL's status and its problem's title
// is the status's HTTP text.
func RegisterCodes(codes map[Code]CodeInfo) {
	appCodesMu.Lock()
	defer appCodesMu.Unlock()
	old := map[Code]CodeInfo{}
	if m := appCodes.Load(); m != nil {
		old = *m
	}
	next := make(map[Code]CodeInfo, len(old)+len(codes))
	for c, info := range old {
		next[c] = info
	}
	sorted := make([]Code, 0, len(codes))
	for c := range codes {
		sorted = append(sorted, c)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	for _, c := range sorted {
		info := codes[c]
		_, own := codeTable[c]
		prev, registered := old[c]
		switch {
		case !codeForm.MatchString(string(c)):
			panic(fmt.Sprintf("idem: RegisterCodes: code %q is not upper-case letters, digits and underscores", c))
		case own:
			panic(fmt.Sprintf("idem: RegisterCodes: %s is one of idem's own codes", c))
		case info.Status < 400 || info.Status > 599:
			panic(fmt.Sprintf("idem: RegisterCodes: %s has status %d, not a 4xx or 5xx", c, info.Status))
		case info.Title == "" || info.Action == "":
			panic(fmt.Sprintf("idem: RegisterCodes: %s needs a title and an action", c))
		case registered && prev != info:
			panic(fmt.Sprintf("idem: RegisterCodes: %s is registered already as %+v", c, prev))
		}
		next[c] = info
	}
	appCodes.Store(&next)
}

// lookup is what c means: one of idem's codes, or one an application
// registered.
func lookup(c Code) (CodeInfo, bool) {
	if info, ok := codeTable[c]; ok {
		return info, true
	}
	if m := appCodes.Load(); m != nil {
		info, ok := (*m)[c]
		return info, ok
	}
	return CodeInfo{}, false
}

// Info returns what code means on the wire, for idem's own codes and those
// an application registered (RegisterCodes); an unknown code reads as
// INTERNAL's status and title.
func (c Code) Info() CodeInfo {
	if info, ok := lookup(c); ok {
		return info
	}
	return codeTable[CodeInternal]
}

// Known reports whether c is one of idem's codes or one an application
// registered (RegisterCodes).
func (c Code) Known() bool {
	_, ok := lookup(c)
	return ok
}

// Codes returns every code of idem's own, sorted; the codes applications
// registered (RegisterCodes) are not among them.
func Codes() []Code {
	out := make([]Code, 0, len(codeTable))
	for c := range codeTable {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
