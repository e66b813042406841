package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-run/idem"
)

// The states of a service account.
const (
	serviceAccountPending  = "pending_approval"
	serviceAccountApproved = "approved"
)

// serviceAccountView is a service account. ApprovedBy and ApprovedAt are
// null until it is approved, and never change after.
type serviceAccountView struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Status     string     `json:"status" jsonschema:"enum=pending_approval,enum=approved"`
	ApprovedBy *string    `json:"approvedBy" jsonschema:"nullable"`
	ApprovedAt *time.Time `json:"approvedAt" jsonschema:"nullable"`
	CreatedAt  time.Time  `json:"createdAt"`
}

type serviceAccountInput struct {
	ID string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=200"`
}

func (a *App) serviceAccountOperations() []idem.Operation {
	unknown := idem.Declare(idem.CodeNotFound, "No service account with this id exists in the caller's org.")
	return []idem.Operation{
		idem.Define(idem.Metadata{
			Name: "serviceaccount.approve", Method: "POST", Path: "/v1/service-accounts/{id}/approve",
			Summary:    "Approve a pending service account (approvers only); repeating returns the same approval",
			SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{Transactional: true, Kind: idem.RetryIntrinsicReplay, Enforcement: idem.EnforceServerDerivedTransition, Reconcile: "serviceaccount.show",
				Rationale: "The service account's one pending-to-approved transition is the identity: the first approval fixes approvedBy and approvedAt, and a repeat, by any approver, returns that same transition, so a caller key would add no safety. Run serviceaccount.show before reporting state."},
			Errors: []idem.DeclaredError{unknown,
				idem.Declare(idem.CodeForbidden, "Only principals with the approver role may approve service accounts.")},
		}, a.approveServiceAccount),

		idem.Define(idem.Metadata{
			Name: "serviceaccount.show", Method: "GET", Path: "/v1/service-accounts/{id}",
			Summary:    "Show a service account and its approval",
			SideEffect: idem.SideEffectRead,
			Retry: idem.RetryContract{Kind: idem.RetryFreshRead,
				Rationale: "A read of the service account's current state: it always executes and is never served from a stored attempt."},
			Errors: []idem.DeclaredError{unknown},
		}, a.showServiceAccount),
	}
}

func loadServiceAccount(ctx context.Context, tx *Tx, org, id string) (serviceAccountView, error) {
	var s serviceAccountView
	var approvedBy sql.NullString
	var approvedAt sql.NullInt64
	var created int64
	err := tx.QueryRow(ctx, `SELECT id, name, status, approved_by, approved_at, created_at
		FROM idem_demo_service_accounts WHERE org = ? AND id = ?`, org, id).
		Scan(&s.ID, &s.Name, &s.Status, &approvedBy, &approvedAt, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return serviceAccountView{}, notFound("service account", id)
	} else if err != nil {
		return serviceAccountView{}, fmt.Errorf("read service account %s: %w", id, err)
	}
	if approvedBy.Valid {
		s.ApprovedBy = &approvedBy.String
	}
	if approvedAt.Valid {
		t := fromMicros(approvedAt.Int64)
		s.ApprovedAt = &t
	}
	s.CreatedAt = fromMicros(created)
	return s, nil
}

func (a *App) showServiceAccount(ctx context.Context, call *idem.Call, in serviceAccountInput) (serviceAccountView, error) {
	var out serviceAccountView
	err := a.db.InTx(ctx, func(tx *Tx) error {
		var err error
		out, err = loadServiceAccount(ctx, tx, call.Principal.Org, in.ID)
		return err
	})
	return out, err
}

// approveServiceAccount moves a pending account to approved once; the
// conditional update makes the first approval win a race, and every later
// one reads the transition it made.
func (a *App) approveServiceAccount(ctx context.Context, call *idem.Call, in serviceAccountInput) (serviceAccountView, error) {
	org := call.Principal.Org
	var out serviceAccountView
	err := a.db.InCall(ctx, call, func(tx *Tx) error {
		if _, err := loadServiceAccount(ctx, tx, org, in.ID); err != nil {
			return err
		}
		if !call.Principal.HasRole(idem.RoleApprover) {
			return idem.Errorf(idem.CodeForbidden, "approving service account %s needs the %s role, which %s lacks", in.ID, idem.RoleApprover, call.Principal.ID)
		}
		if _, err := tx.Exec(ctx, `UPDATE idem_demo_service_accounts SET status = ?, approved_by = ?, approved_at = ?
			WHERE org = ? AND id = ? AND status = ?`,
			serviceAccountApproved, call.Principal.ID, micros(a.now()), org, in.ID, serviceAccountPending); err != nil {
			return fmt.Errorf("approve service account %s: %w", in.ID, err)
		}
		var err error
		out, err = loadServiceAccount(ctx, tx, org, in.ID)
		return err
	})
	return out, err
}
