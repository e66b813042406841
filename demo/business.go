package demo

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/idem-run/idem"
)

// Business is one business of an org; its slug is unique in the org.
type Business struct {
	Slug      string    `json:"slug"`
	Name      string    `json:"name"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt time.Time `json:"createdAt"`
}

// BusinessList is the answer of business.list.
type BusinessList struct {
	Businesses []Business `json:"businesses"`
	// NextCursor is the cursor of the next page, null on the last.
	NextCursor *string `json:"nextCursor" jsonschema:"nullable,description=pass as cursor for the next page; null on the last page"`
}

type businessCreateIn struct {
	Slug string `json:"slug" jsonschema:"minLength=1,maxLength=63,pattern=^[a-z0-9]+(-[a-z0-9]+)*$,description=lower-case letters and digits in dash-separated words; unique in the org"`
	Name string `json:"name" jsonschema:"minLength=1,maxLength=200"`
	// Simulate is fault injection for the demo's tests and tours.
	Simulate *businessSimulate `json:"simulate,omitempty" jsonschema:"description=demo fault injection after the insert, inside the transaction"`
}

// businessSimulate injects faults after the insert, inside the
// operation's transaction: nothing of them commits when they fail.
type businessSimulate struct {
	DelayMs        int  `json:"delayMs,omitempty" jsonschema:"minimum=0,maximum=60000,description=sleep this many milliseconds after the insert, before the commit (honours cancellation)"`
	FailAfterWrite bool `json:"failAfterWrite,omitempty" jsonschema:"description=fail with 500 after the insert: the transaction rolls back, nothing remains and the key is free"`
}

type businessSlugIn struct {
	Slug string `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
}

type businessListIn struct {
	Limit  int    `json:"limit,omitempty" in:"query" jsonschema:"minimum=1,maximum=100,default=100,description=at most this many rows (default 100)"`
	Cursor string `json:"cursor,omitempty" in:"query" jsonschema:"minLength=1,maxLength=1024,description=nextCursor of the previous page; leave it out for the first page"`
}

func (a *App) businessCreate() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "business.create", Method: http.MethodPost, Path: "/v1/businesses",
		Summary:    "Create a business with a slug unique in the org",
		SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{
			Transactional: true,
			Kind:          idem.RetrySameKeyReplay,
			Reconcile:     "business.show",
			Rationale: "A create is not repeatable: a blind retry either fails with BUSINESS_EXISTS or, under another slug, makes a second business. " +
				"A key persisted before the first call lets an ambiguous create be resent and answered with the original result.",
		},
		Errors: []idem.DeclaredError{
			{Code: CodeBusinessExists, Status: http.StatusConflict, Message: "A business with this slug already exists in the org (a stored outcome: a same-key retry replays it)."},
		},
		SuccessStatus: http.StatusCreated,
		Location:      true, // set below
	}, func(ctx context.Context, call *idem.Call, in businessCreateIn) (Business, error) {
		b := Business{Slug: in.Slug, Name: in.Name, CreatedBy: call.Principal.ID, CreatedAt: a.now()}
		err := a.db.InCall(ctx, call, func(tx *Tx) error {
			n, err := tx.Exec(ctx, `INSERT INTO idem_demo_businesses (org, slug, name, created_by, created_at) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (org, slug) DO NOTHING`, call.Principal.Org, b.Slug, b.Name, b.CreatedBy, micros(b.CreatedAt))
			if err != nil {
				return err
			}
			if n == 0 {
				return idem.Errorf(CodeBusinessExists, "a business with slug %q already exists in this org; choose another slug or run business.show", b.Slug)
			}
			return nil
		})
		if err == nil {
			// Still inside the operation's transaction, which commits only
			// once the handler returns: a failure here rolls the insert back.
			err = simulateAfterWrite(ctx, in.Simulate)
		}
		if err != nil {
			return Business{}, err
		}
		call.Header().Set("Location", "/v1/businesses/"+url.PathEscape(b.Slug))
		return b, nil
	})
}

// simulateAfterWrite applies business.create's fault injection.
func simulateAfterWrite(ctx context.Context, sim *businessSimulate) error {
	if sim == nil {
		return nil
	}
	if sim.DelayMs > 0 {
		select {
		case <-time.After(time.Duration(sim.DelayMs) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if sim.FailAfterWrite {
		return errors.New("simulated failure after the insert (simulate.failAfterWrite)")
	}
	return nil
}

func (a *App) businessShow() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "business.show", Method: http.MethodGet, Path: "/v1/businesses/{slug}",
		Summary:    "Show a business",
		SideEffect: idem.SideEffectRead,
		Retry:      idem.RetryContract{Rationale: freshReadRationale},
		Errors:     []idem.DeclaredError{errBusinessNotFound},
	}, func(ctx context.Context, call *idem.Call, in businessSlugIn) (Business, error) {
		var b Business
		err := a.db.InTx(ctx, func(tx *Tx) error {
			var err error
			b, err = getBusiness(ctx, tx, call.Principal.Org, in.Slug)
			return err
		})
		return b, err
	})
}

func (a *App) businessList() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "business.list", Method: http.MethodGet, Path: "/v1/businesses",
		Summary:    "List the org's businesses by slug, one page at a time",
		SideEffect: idem.SideEffectRead,
		Retry:      idem.RetryContract{Rationale: freshReadRationale},
	}, func(ctx context.Context, call *idem.Call, in businessListIn) (BusinessList, error) {
		var out BusinessList
		err := a.db.InTx(ctx, func(tx *Tx) error {
			var err error
			out.Businesses, out.NextCursor, err = readPage(ctx, tx, bySlug, in.Limit, in.Cursor,
				`SELECT slug, name, created_by, created_at FROM idem_demo_businesses WHERE org = ?`, []any{call.Principal.Org},
				func(rows rowScanner) (Business, []any, error) {
					var b Business
					var at int64
					err := rows.Scan(&b.Slug, &b.Name, &b.CreatedBy, &at)
					b.CreatedAt = fromMicros(at)
					return b, []any{b.Slug}, err
				})
			return err
		})
		return out, err
	})
}

// getBusiness reads one business, NOT_FOUND if the org has none by that
// slug.
func getBusiness(ctx context.Context, tx *Tx, org, slug string) (Business, error) {
	b := Business{Slug: slug}
	var at int64
	err := tx.QueryRow(ctx, `SELECT name, created_by, created_at FROM idem_demo_businesses WHERE org = ? AND slug = ?`, org, slug).
		Scan(&b.Name, &b.CreatedBy, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Business{}, notFound("business", slug)
	}
	if err != nil {
		return Business{}, err
	}
	b.CreatedAt = fromMicros(at)
	return b, nil
}
