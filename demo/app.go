// Package demo is the reference application of SPEC §12: a small platform
// whose operations exercise every retry contract kind, declared through the
// same public API a service builder uses. Its tables live in the same
// database as idem's attempt records.
package demo

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"time"

	"github.com/idem-run/idem"
)

// Config configures the application.
type Config struct {
	// Clock tells the time; idem.SystemClock when nil.
	Clock idem.Clock
	// HTTPClient delivers webhooks; a client with a short timeout when nil.
	// Its *http.Transport (or the default one) dials through the
	// destination rule (destination.go).
	HTTPClient *http.Client
	// WebhookLoopback lets webhooks deliver to loopback addresses (a
	// local receiver, idem webhook listen); without it such a delivery
	// is refused before connecting (docs/webhooks.md).
	WebhookLoopback bool
	// Sealer encrypts secrets the application must keep usable (webhook
	// signing secrets) before they reach its tables; the server passes
	// the same secretbox it seals one-time results with.
	Sealer idem.Sealer
	// Writer, if set, runs the application's transactions on SQLite: pass
	// the idem store's sqlitestore.Store.Write, so that handlers' writes
	// share the store's single writer and its group commit instead of
	// contending with it for the file's lock. Unused on PostgreSQL.
	Writer func(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
}

// App is the reference application on one database.
type App struct {
	db     *DB
	clock  idem.Clock
	http   *http.Client
	sealer idem.Sealer
}

// Orgs are the organisations the demo tokens belong to; each gets the
// fixtures of SPEC §12 on first start.
var Orgs = []string{"acme", "globex"}

// Open connects to the database named by storeURL (sqlite:PATH or
// postgres://…, the same URL as the idem store), applies the demo's
// migrations and creates the fixtures, idempotently (several instances may
// start at once).
func Open(ctx context.Context, storeURL string, cfg Config) (*App, error) {
	if cfg.Clock == nil {
		cfg.Clock = idem.SystemClock{}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Sealer == nil {
		return nil, fmt.Errorf("demo: Config.Sealer is required (it seals webhook signing secrets)")
	}
	db, err := openDB(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	if db.dialect == "sqlite" {
		db.writer = cfg.Writer
	}
	a := &App{db: db, clock: cfg.Clock, http: guardedClient(cfg.HTTPClient, cfg.WebhookLoopback), sealer: cfg.Sealer}
	for _, org := range Orgs {
		if err := a.seed(ctx, org); err != nil {
			db.Close()
			return nil, fmt.Errorf("demo: fixtures for %s: %w", org, err)
		}
	}
	return a, nil
}

// Close closes the application's connections.
func (a *App) Close() error { return a.db.Close() }

// Operations returns every operation of SPEC §12.
func (a *App) Operations() []idem.Operation {
	return append(a.platformOperations(), a.commerceOperations()...)
}

// Policies returns the application's policies (the refund approval rule is
// declared on its operation; none apply to every operation).
func (a *App) Policies() []idem.Policy { return nil }

// Tokens returns the demo bearer tokens of SPEC §12 (active only with
// --demo).
func Tokens() map[string]idem.Principal {
	return map[string]idem.Principal{
		"demo-agent":     {Org: "acme", ID: "agent-1", Kind: idem.KindAgent},
		"demo-agent-2":   {Org: "acme", ID: "agent-2", Kind: idem.KindAgent},
		"demo-browser":   {Org: "acme", ID: "alice", Kind: idem.KindBrowser},
		"demo-approver":  {Org: "acme", ID: "bob", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}},
		"demo-other-org": {Org: "globex", ID: "agent-9", Kind: idem.KindAgent},
	}
}

// Routes returns the demo's extra HTTP routes (the gateway ledger).
func (a *App) Routes() map[string]func(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	return a.withCeilingRoute(a.commerceRoutes())
}

// seed creates an org's fixtures if they are not there yet.
func (a *App) seed(ctx context.Context, org string) error {
	if err := a.seedPlatform(ctx, org); err != nil {
		return err
	}
	return a.seedCommerce(ctx, org)
}

// now is the clock's time in UTC at microsecond precision.
func (a *App) now() time.Time { return a.clock.Now().UTC().Truncate(time.Microsecond) }

// notFound is the 404 every unknown resource answers.
func notFound(kind, id string) error {
	return idem.Errorf(idem.CodeNotFound, "no %s %q in this org", kind, id)
}
