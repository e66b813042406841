package main

import (
	"fmt"
	"net/http"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/client"
)

// Exit codes of the commands that talk to a server (SPEC §10.3), beyond
// exitOK, exitError and exitUsage. docs/cli.md has the table.
const (
	exitTransient     = 3
	exitIndeterminate = 4
	exitApproval      = 5
)

// exitStatus is the error of a command that has already told the user
// everything (stdout and stderr): report only returns the code.
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// exitCode is the one mapping from a failed call to an exit code, in this
// order:
//
//	refused locally (a key with --dry-run, a --task of another intent)  2
//	no HTTP answer (NETWORK_ERROR, status 0)                            3
//	IDEMPOTENCY_RESULT_INDETERMINATE, IDEMPOTENCY_RESULT_EXPIRED        4
//	APPROVAL_REQUIRED                                                   5
//	a retryable 503 (STORE_UNAVAILABLE before the handler: nothing ran) 3
//	any other 5xx (the handler may have run: reconcile)                 4
//	any other retryable answer (IN_FLIGHT after the retries, 429)       3
//	any other 4xx (APPROVAL_REJECTED, POLICY_DENIED, KEY_REUSED, …)     1
func exitCode(e *client.Error) int {
	switch {
	case e.Refused:
		return exitUsage
	case e.Status == 0 || e.Code == idem.CodeNetworkError:
		return exitTransient
	case e.Code == idem.CodeIdempotencyResultIndeterminate, e.Code == idem.CodeIdempotencyResultExpired:
		return exitIndeterminate
	case e.Code == idem.CodeApprovalRequired:
		return exitApproval
	case e.Status == http.StatusServiceUnavailable && e.Retryable:
		// A keyed 503 after the handler started is not retryable (its
		// record is indeterminate): it falls through to reconcile.
		return exitTransient
	case e.Status >= 500:
		return exitIndeterminate
	case e.Retryable:
		return exitTransient
	}
	return exitError
}
