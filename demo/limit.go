package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idem-run/idem"
)

// limitView is a usage limit. Its identity is (subscription, subject);
// version counts its states: 1 until limit.update first changes it.
type limitView struct {
	ID           string    `json:"id"`
	Subscription string    `json:"subscription"`
	Subject      string    `json:"subject"`
	Quantity     int64     `json:"quantity"`
	Version      int64     `json:"version"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

type limitCreateInput struct {
	Sub      string `json:"sub" in:"path" jsonschema:"minLength=1,maxLength=200"`
	Subject  string `json:"subject" jsonschema:"minLength=1,maxLength=200,description=what the limit applies to; with the subscription it identifies the limit"`
	Quantity int64  `json:"quantity" jsonschema:"minimum=0,description=the limit's quantity"`
}

type limitUpdateInput struct {
	ID       string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=200"`
	Quantity int64  `json:"quantity" jsonschema:"minimum=0,description=the limit's new quantity"`
}

type limitListInput struct {
	Sub    string `json:"sub" in:"path" jsonschema:"minLength=1,maxLength=200"`
	Limit  int    `json:"limit,omitempty" in:"query" jsonschema:"minimum=1,maximum=100,default=100,description=at most this many rows (default 100)"`
	Cursor string `json:"cursor,omitempty" in:"query" jsonschema:"minLength=1,maxLength=1024,description=nextCursor of the previous page; leave it out for the first page"`
}

type limitList struct {
	Limits []limitView `json:"limits"`
	// NextCursor is the cursor of the next page, null on the last.
	NextCursor *string `json:"nextCursor" jsonschema:"nullable,description=pass as cursor for the next page; null on the last page"`
}

func (a *App) limitOperations() []idem.Operation {
	unknownSubscription := idem.Declare(idem.CodeNotFound, "No subscription with this id exists in the caller's org.")
	return []idem.Operation{
		idem.Define(idem.Metadata{
			Name: "limit.create", Method: "POST", Path: "/v1/subscriptions/{sub}/limits",
			Summary:    "Create a usage limit for a subject of a subscription; an exact repeat returns the existing limit",
			SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{Transactional: true, Kind: idem.RetryConvergent, Enforcement: idem.EnforceResourceIdentity, Reconcile: "limit.list",
				Rationale: "A limit is identified by its subscription and subject, so an exact repeat finds the row the first call created (200) instead of creating another, and a row that differs or changed since answers LIMIT_CONFLICT rather than stale success. After an ambiguous result run limit.list, and repeat only if the limit is still missing."},
			SuccessStatus: http.StatusCreated,
			Errors: []idem.DeclaredError{unknownSubscription,
				idem.Declare(CodeLimitConflict, "A limit for this subject exists with another quantity or changed since it was created (details.current); change it with limit.update.")},
		}, a.createLimit),

		idem.Define(idem.Metadata{
			Name: "limit.update", Method: "PUT", Path: "/v1/limits/{id}",
			Summary:    "Set the quantity of a usage limit",
			SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{Transactional: true, Kind: idem.RetryConvergent, Enforcement: idem.EnforceResourceIdentity, Reconcile: "limit.list",
				Rationale: "It sets an absolute quantity on a stable limit id, so repeating it converges on the same state; but that quantity may be older than a change someone made since, so after an ambiguous result run limit.list and repeat only if the intent is still current."},
			Errors: []idem.DeclaredError{idem.Declare(idem.CodeNotFound, "No limit with this id exists in the caller's org.")},
		}, a.updateLimit),

		idem.Define(idem.Metadata{
			Name: "limit.list", Method: "GET", Path: "/v1/subscriptions/{sub}/limits",
			Summary:    "List the usage limits of a subscription oldest first, one page at a time",
			SideEffect: idem.SideEffectRead,
			Retry: idem.RetryContract{Kind: idem.RetryFreshRead,
				Rationale: "A read of the subscription's current limits: it always executes and is never served from a stored attempt."},
			Errors: []idem.DeclaredError{unknownSubscription},
		}, a.listLimits),
	}
}

const limitColumns = `id, subscription_id, subject, quantity, version, created_at, updated_at`

func scanLimit(row rowScanner) (limitView, error) {
	var l limitView
	var created, updated int64
	if err := row.Scan(&l.ID, &l.Subscription, &l.Subject, &l.Quantity, &l.Version, &created, &updated); err != nil {
		return limitView{}, err
	}
	l.CreatedAt, l.UpdatedAt = fromMicros(created), fromMicros(updated)
	return l, nil
}

// requireSubscription answers NOT_FOUND for a subscription the org lacks.
func requireSubscription(ctx context.Context, tx *Tx, org, id string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM idem_demo_subscriptions WHERE org = ? AND id = ?`, org, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("subscription", id)
	}
	return err
}

// createLimit inserts the limit unless its identity exists; the unique
// (org, subscription, subject) constraint decides a race, so two
// concurrent creates never make two rows.
func (a *App) createLimit(ctx context.Context, call *idem.Call, in limitCreateInput) (limitView, error) {
	org := call.Principal.Org
	var out limitView
	err := a.db.InCall(ctx, call, func(tx *Tx) error {
		if err := requireSubscription(ctx, tx, org, in.Sub); err != nil {
			return err
		}
		now := a.now()
		id := commerceID("lim_")
		n, err := tx.Exec(ctx, `INSERT INTO idem_demo_limits (org, `+limitColumns+`) VALUES (?, ?, ?, ?, ?, 1, ?, ?)
			ON CONFLICT (org, subscription_id, subject) DO NOTHING`, org, id, in.Sub, in.Subject, in.Quantity, micros(now), micros(now))
		if err != nil {
			return fmt.Errorf("create limit: %w", err)
		}
		if n == 1 {
			out = limitView{ID: id, Subscription: in.Sub, Subject: in.Subject, Quantity: in.Quantity, Version: 1, CreatedAt: now, UpdatedAt: now}
			return nil
		}
		current, err := scanLimit(tx.QueryRow(ctx, `SELECT `+limitColumns+` FROM idem_demo_limits
			WHERE org = ? AND subscription_id = ? AND subject = ?`, org, in.Sub, in.Subject))
		if err != nil {
			return fmt.Errorf("read limit: %w", err)
		}
		if current.Quantity != in.Quantity || current.Version != 1 {
			return idem.Errorf(CodeLimitConflict, "the limit for subject %q of subscription %s exists with quantity %d (version %d) and differs from this request or changed since it was created; change it with limit.update %s",
				in.Subject, in.Sub, current.Quantity, current.Version, current.ID).WithDetail("current", current)
		}
		out = current
		call.SetStatus(http.StatusOK)
		return nil
	})
	return out, err
}

// updateLimit sets a limit's quantity. Setting the quantity it already has
// changes nothing (a convergent write that already holds), so the limit
// keeps its version; any other quantity bumps version and updatedAt.
func (a *App) updateLimit(ctx context.Context, call *idem.Call, in limitUpdateInput) (limitView, error) {
	org := call.Principal.Org
	var out limitView
	err := a.db.InCall(ctx, call, func(tx *Tx) error {
		current, err := scanLimit(tx.QueryRow(ctx, `SELECT `+limitColumns+` FROM idem_demo_limits
			WHERE org = ? AND id = ?`+tx.d.forUpdate(), org, in.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("limit", in.ID)
		} else if err != nil {
			return fmt.Errorf("read limit %s: %w", in.ID, err)
		}
		if current.Quantity == in.Quantity {
			out = current
			return nil
		}
		now := a.now()
		if _, err := tx.Exec(ctx, `UPDATE idem_demo_limits SET quantity = ?, version = version + 1, updated_at = ?
			WHERE org = ? AND id = ?`, in.Quantity, micros(now), org, in.ID); err != nil {
			return fmt.Errorf("update limit %s: %w", in.ID, err)
		}
		current.Quantity, current.Version, current.UpdatedAt = in.Quantity, current.Version+1, now
		out = current
		return nil
	})
	return out, err
}

func (a *App) listLimits(ctx context.Context, call *idem.Call, in limitListInput) (limitList, error) {
	org := call.Principal.Org
	var out limitList
	err := a.db.InTx(ctx, func(tx *Tx) error {
		if err := requireSubscription(ctx, tx, org, in.Sub); err != nil {
			return err
		}
		var err error
		out.Limits, out.NextCursor, err = readPage(ctx, tx, byCreated, in.Limit, in.Cursor,
			`SELECT `+limitColumns+` FROM idem_demo_limits WHERE org = ? AND subscription_id = ?`, []any{org, in.Sub},
			func(rows rowScanner) (limitView, []any, error) {
				l, err := scanLimit(rows)
				return l, []any{micros(l.CreatedAt), l.ID}, err
			})
		return err
	})
	return out, err
}
