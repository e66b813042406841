package idem

import (
	"slices"
	"strings"
	"time"
)

// PrincipalKind says what kind of caller a principal is.
type PrincipalKind string

// The principal kinds of SPEC §2.
const (
	KindAgent          PrincipalKind = "agent"
	KindCLISession     PrincipalKind = "cli_session"
	KindServiceAccount PrincipalKind = "service_account"
	KindBrowser        PrincipalKind = "browser"
)

// PrincipalKinds lists the principal kinds, in SPEC §2's order.
var PrincipalKinds = []PrincipalKind{KindAgent, KindCLISession, KindServiceAccount, KindBrowser}

// Valid reports whether k is one of PrincipalKinds.
func (k PrincipalKind) Valid() bool { return slices.Contains(PrincipalKinds, k) }

// PrincipalKindList names PrincipalKinds as a message lists them:
// "agent, cli_session, service_account, browser".
var PrincipalKindList = func() string {
	names := make([]string, len(PrincipalKinds))
	for i, k := range PrincipalKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}()

// RoleApprover may decide approvals of its org.
const RoleApprover = "approver"

// Principal is an authenticated caller.
type Principal struct {
	Org   string        `json:"org"`
	ID    string        `json:"id"`
	Kind  PrincipalKind `json:"kind"`
	Roles []string      `json:"roles,omitempty"`
	// Expires, when set, is when the credential that authenticated the
	// principal stops being valid (a JWT's exp): a session opened with
	// it, the web console's, ends then too. Zero: the credential does not
	// expire by itself (a tokens-file token).
	Expires time.Time `json:"-"`
}

// HasRole reports whether p holds role.
func (p Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

// MustSendKey reports whether a live same_key_replay call from p without a
// key is refused with IDEMPOTENCY_KEY_REQUIRED (automation kinds must send
// one; shared human browser flows may stay unkeyed).
func (p Principal) MustSendKey() bool {
	return p.Kind == KindAgent || p.Kind == KindCLISession || p.Kind == KindServiceAccount
}

// Scope returns the idempotency scope of p.
func (p Principal) Scope() Scope { return Scope{Org: p.Org, Principal: p.ID} }

// Scope is where idempotency keys live: one org and one principal. The same
// key in another scope is a different, independent attempt.
type Scope struct {
	Org       string
	Principal string
}
