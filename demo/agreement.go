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

// agreementTerms are the terms of an agreement (SPEC §12).
type agreementTerms struct {
	Plan  string `json:"plan" jsonschema:"minLength=1,maxLength=100,description=plan name: starter\\, team and enterprise cost 1000\\, 2500 and 6000 cents per seat per month; any other plan 2000"`
	Seats int64  `json:"seats" jsonschema:"minimum=1,maximum=1000000,description=number of seats"`
}

// agreementPrice is what the terms cost, in cents per month.
type agreementPrice struct {
	Currency string `json:"currency"`
	// UnitAmount is the price of one seat.
	UnitAmount  int64  `json:"unitAmount"`
	Seats       int64  `json:"seats"`
	TotalAmount int64  `json:"totalAmount"`
	Interval    string `json:"interval"`
}

// seatPrices are the per-seat monthly prices of the named plans, in cents;
// any other plan is priced at standardSeatPrice.
var seatPrices = map[string]int64{"starter": 1000, "team": 2500, "enterprise": 6000}

const standardSeatPrice = 2000

func priceOf(t agreementTerms) agreementPrice {
	unit, ok := seatPrices[t.Plan]
	if !ok {
		unit = standardSeatPrice
	}
	return agreementPrice{Currency: "usd", UnitAmount: unit, Seats: t.Seats, TotalAmount: unit * t.Seats, Interval: "month"}
}

type agreementInput struct {
	Slug  string         `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	Terms agreementTerms `json:"terms"`
}

type agreementListInput struct {
	Slug   string `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	Limit  int    `json:"limit,omitempty" in:"query" jsonschema:"minimum=1,maximum=100,default=100,description=at most this many rows (default 100)"`
	Cursor string `json:"cursor,omitempty" in:"query" jsonschema:"minLength=1,maxLength=1024,description=nextCursor of the previous page; leave it out for the first page"`
}

// agreementPreview is a fresh observation of what the terms would cost.
type agreementPreview struct {
	Business   string         `json:"business"`
	Terms      agreementTerms `json:"terms"`
	Price      agreementPrice `json:"price"`
	ObservedAt time.Time      `json:"observedAt"`
}

// agreementView is a confirmed agreement.
type agreementView struct {
	ID        string         `json:"id"`
	Business  string         `json:"business"`
	Terms     agreementTerms `json:"terms"`
	Price     agreementPrice `json:"price"`
	CreatedBy string         `json:"createdBy"`
	CreatedAt time.Time      `json:"createdAt"`
}

type agreementList struct {
	Agreements []agreementView `json:"agreements"`
	// NextCursor is the cursor of the next page, null on the last.
	NextCursor *string `json:"nextCursor" jsonschema:"nullable,description=pass as cursor for the next page; null on the last page"`
}

func (a *App) agreementOperations() []idem.Operation {
	unknownBusiness := idem.Declare(idem.CodeNotFound, "No business with this slug exists in the caller's org.")
	return []idem.Operation{
		idem.Define(idem.Metadata{
			Name: "agreement.preview", Method: "POST", Path: "/v1/businesses/{slug}/agreements/preview",
			Summary:    "Preview an agreement: what the terms would cost, without creating anything",
			SideEffect: idem.SideEffectNone,
			Retry: idem.RetryContract{Kind: idem.RetryPreview,
				Rationale: "A dedicated preview route: each call is a fresh observation that changes nothing, so it takes no key; confirm with agreement.create under its own key."},
			Errors: []idem.DeclaredError{unknownBusiness},
		}, a.previewAgreement),

		idem.Define(idem.Metadata{
			Name: "agreement.create", Method: "POST", Path: "/v1/businesses/{slug}/agreements",
			Summary:    "Confirm an agreement on the given terms for a business",
			SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{Transactional: true, Kind: idem.RetrySameKeyReplay, Reconcile: "agreement.list",
				Rationale: "Each call creates a new agreement, so a retry must replay the first attempt under its key instead of creating a second one. A replay proves what that attempt created; run agreement.list before reporting current state."},
			SuccessStatus: http.StatusCreated,
			Errors:        []idem.DeclaredError{unknownBusiness},
		}, a.createAgreement),

		idem.Define(idem.Metadata{
			Name: "agreement.list", Method: "GET", Path: "/v1/businesses/{slug}/agreements",
			Summary:    "List the agreements of a business oldest first, one page at a time",
			SideEffect: idem.SideEffectRead,
			Retry: idem.RetryContract{Kind: idem.RetryFreshRead,
				Rationale: "A read of the business's current agreements: it always executes and is never served from a stored attempt."},
			Errors: []idem.DeclaredError{unknownBusiness},
		}, a.listAgreements),
	}
}

// requireBusiness answers NOT_FOUND for a business the org lacks. The
// businesses table belongs to the platform half (business.go).
func requireBusiness(ctx context.Context, tx *Tx, org, slug string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM idem_demo_businesses WHERE org = ? AND slug = ?`, org, slug).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("business", slug)
	}
	return err
}

func (a *App) previewAgreement(ctx context.Context, call *idem.Call, in agreementInput) (agreementPreview, error) {
	err := a.db.InTx(ctx, func(tx *Tx) error {
		return requireBusiness(ctx, tx, call.Principal.Org, in.Slug)
	})
	if err != nil {
		return agreementPreview{}, err
	}
	return agreementPreview{Business: in.Slug, Terms: in.Terms, Price: priceOf(in.Terms), ObservedAt: a.now()}, nil
}

func (a *App) createAgreement(ctx context.Context, call *idem.Call, in agreementInput) (agreementView, error) {
	org := call.Principal.Org
	out := agreementView{
		ID: commerceID("agr_"), Business: in.Slug, Terms: in.Terms, Price: priceOf(in.Terms),
		CreatedBy: call.Principal.ID, CreatedAt: a.now(),
	}
	err := a.db.InCall(ctx, call, func(tx *Tx) error {
		if err := requireBusiness(ctx, tx, org, in.Slug); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO idem_demo_agreements (org, id, business_slug, plan, seats, unit_amount, total_amount, created_by, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, org, out.ID, in.Slug, in.Terms.Plan, in.Terms.Seats,
			out.Price.UnitAmount, out.Price.TotalAmount, out.CreatedBy, micros(out.CreatedAt))
		if err != nil {
			return fmt.Errorf("create agreement: %w", err)
		}
		return nil
	})
	if err != nil {
		return agreementView{}, err
	}
	return out, nil
}

func (a *App) listAgreements(ctx context.Context, call *idem.Call, in agreementListInput) (agreementList, error) {
	org := call.Principal.Org
	var out agreementList
	err := a.db.InTx(ctx, func(tx *Tx) error {
		if err := requireBusiness(ctx, tx, org, in.Slug); err != nil {
			return err
		}
		var err error
		out.Agreements, out.NextCursor, err = readPage(ctx, tx, byCreated, in.Limit, in.Cursor,
			`SELECT id, plan, seats, unit_amount, total_amount, created_by, created_at
			FROM idem_demo_agreements WHERE org = ? AND business_slug = ?`, []any{org, in.Slug},
			func(rows rowScanner) (agreementView, []any, error) {
				v := agreementView{Business: in.Slug}
				var created int64
				if err := rows.Scan(&v.ID, &v.Terms.Plan, &v.Terms.Seats, &v.Price.UnitAmount, &v.Price.TotalAmount, &v.CreatedBy, &created); err != nil {
					return v, nil, fmt.Errorf("list agreements: %w", err)
				}
				v.Price.Currency, v.Price.Seats, v.Price.Interval = "usd", v.Terms.Seats, "month"
				v.CreatedAt = fromMicros(created)
				return v, []any{created, v.ID}, nil
			})
		return err
	})
	return out, err
}
