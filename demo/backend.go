package demo

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"time"

	"github.com/idem-run/idem"
)

// Backend is one backend binding: the origin a business's named backend
// points to in one environment. (business, name, environment) identifies it.
type Backend struct {
	Business    string    `json:"business"`
	Name        string    `json:"name"`
	Environment string    `json:"environment"`
	OriginURL   string    `json:"originUrl"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
	UpdatedBy   string    `json:"updatedBy"`
}

// BackendList is the answer of backend.list.
type BackendList struct {
	Backends []Backend `json:"backends"`
	// NextCursor is the cursor of the next page, null on the last.
	NextCursor *string `json:"nextCursor" jsonschema:"nullable,description=pass as cursor for the next page; null on the last page"`
}

// BackendPreview is the answer of a backend.bind dry run: the binding as it
// is (null when there is none) and as the bind would make it.
type BackendPreview struct {
	Environment string         `json:"environment"`
	Name        string         `json:"name"`
	Current     *Backend       `json:"current"`
	Desired     BackendDesired `json:"desired"`
	// Changes reports whether a live bind would write anything.
	Changes bool `json:"changes"`
}

// BackendDesired is the state a bind asks for.
type BackendDesired struct {
	Business    string `json:"business"`
	Name        string `json:"name"`
	Environment string `json:"environment"`
	OriginURL   string `json:"originUrl"`
}

type backendBindIn struct {
	Slug        string `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	Name        string `json:"name" in:"path" jsonschema:"minLength=1,maxLength=63,pattern=^[a-z0-9]+(-[a-z0-9]+)*$,description=the backend's name in the business (lower-case letters and digits in dash-separated words)"`
	Environment string `json:"environment" in:"query" jsonschema:"enum=preview,enum=production,description=the environment the binding applies to"`
	OriginURL   string `json:"originUrl" jsonschema:"format=uri,pattern=^https?://,maxLength=2048,description=absolute http or https URL of the origin"`
}

type backendListIn struct {
	Slug   string `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	Limit  int    `json:"limit,omitempty" in:"query" jsonschema:"minimum=1,maximum=100,default=100,description=at most this many rows (default 100)"`
	Cursor string `json:"cursor,omitempty" in:"query" jsonschema:"minLength=1,maxLength=1024,description=nextCursor of the previous page; leave it out for the first page"`
}

func (a *App) backendBind() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "backend.bind", Method: http.MethodPut, Path: "/v1/businesses/{slug}/backends/{name}",
		Summary:    "Bind a business's named backend to an origin URL in one environment (desired state)",
		SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{
			Transactional: true,
			Kind:          idem.RetryConvergent,
			Enforcement:   idem.EnforceResourceIdentity,
			Reconcile:     "backend.list",
			Preview:       true,
			Rationale: "A desired-state write identified by business, backend name and environment: repeating it converges on the same row, so it takes no key. " +
				"After an ambiguous bind, list the backends and repeat only if the binding still differs and the intent is still current.",
		},
		Errors: []idem.DeclaredError{errBusinessNotFound},
	}, func(ctx context.Context, call *idem.Call, in backendBindIn) (Backend, error) {
		org, now := call.Principal.Org, a.now()
		var out Backend
		err := a.db.InCall(ctx, call, func(tx *Tx) error {
			if _, err := getBusiness(ctx, tx, org, in.Slug); err != nil {
				return err
			}
			// Insert, or update only if the origin differs: an exact repeat
			// writes nothing and keeps updatedAt.
			if _, err := tx.Exec(ctx, `INSERT INTO idem_demo_backends (org, business, name, environment, origin_url, created_at, updated_at, updated_by)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (org, business, name, environment) DO UPDATE
				SET origin_url = excluded.origin_url, updated_at = excluded.updated_at, updated_by = excluded.updated_by
				WHERE idem_demo_backends.origin_url <> excluded.origin_url`,
				org, in.Slug, in.Name, in.Environment, in.OriginURL, micros(now), micros(now), call.Principal.ID); err != nil {
				return err
			}
			b, err := getBackend(ctx, tx, org, in.Slug, in.Name, in.Environment)
			if err != nil {
				return err
			}
			out = *b
			return nil
		})
		return out, err
	}).WithPreview(func(ctx context.Context, call *idem.Call, in backendBindIn) (any, error) {
		p := BackendPreview{
			Environment: in.Environment, Name: in.Name,
			Desired: BackendDesired{Business: in.Slug, Name: in.Name, Environment: in.Environment, OriginURL: in.OriginURL},
		}
		err := a.db.InCall(ctx, call, func(tx *Tx) error {
			if _, err := getBusiness(ctx, tx, call.Principal.Org, in.Slug); err != nil {
				return err
			}
			var err error
			p.Current, err = getBackend(ctx, tx, call.Principal.Org, in.Slug, in.Name, in.Environment)
			return err
		})
		if err != nil {
			return nil, err
		}
		p.Changes = p.Current == nil || p.Current.OriginURL != in.OriginURL
		return p, nil
	})
}

func (a *App) backendList() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "backend.list", Method: http.MethodGet, Path: "/v1/businesses/{slug}/backends",
		Summary:    "List a business's backend bindings in every environment by name, one page at a time",
		SideEffect: idem.SideEffectRead,
		Retry:      idem.RetryContract{Rationale: freshReadRationale},
		Errors:     []idem.DeclaredError{errBusinessNotFound},
	}, func(ctx context.Context, call *idem.Call, in backendListIn) (BackendList, error) {
		org := call.Principal.Org
		var out BackendList
		err := a.db.InTx(ctx, func(tx *Tx) error {
			if _, err := getBusiness(ctx, tx, org, in.Slug); err != nil {
				return err
			}
			var err error
			out.Backends, out.NextCursor, err = readPage(ctx, tx, byBackend, in.Limit, in.Cursor,
				`SELECT name, environment, origin_url, created_at, updated_at, updated_by
				FROM idem_demo_backends WHERE org = ? AND business = ?`, []any{org, in.Slug},
				func(rows rowScanner) (Backend, []any, error) {
					b := Backend{Business: in.Slug}
					var created, updated int64
					err := rows.Scan(&b.Name, &b.Environment, &b.OriginURL, &created, &updated, &b.UpdatedBy)
					b.CreatedAt, b.UpdatedAt = fromMicros(created), fromMicros(updated)
					return b, []any{b.Name, b.Environment}, err
				})
			return err
		})
		return out, err
	})
}

// getBackend reads one binding; nil, nil when there is none.
func getBackend(ctx context.Context, tx *Tx, org, business, name, environment string) (*Backend, error) {
	b := Backend{Business: business, Name: name, Environment: environment}
	var created, updated int64
	err := tx.QueryRow(ctx, `SELECT origin_url, created_at, updated_at, updated_by FROM idem_demo_backends
		WHERE org = ? AND business = ? AND name = ? AND environment = ?`, org, business, name, environment).
		Scan(&b.OriginURL, &created, &updated, &b.UpdatedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b.CreatedAt, b.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &b, nil
}
