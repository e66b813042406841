package server_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/jwtauth"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/telemetry"
)

// The code of the README's and docs/embedding.md's snippets: idem's
// surfaces served from an application's own process, over its store and
// identity, under /idem/ of its own mux, with its own lifecycle. It is
// compiled, not run (it fetches a JWKS and listens on a port).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.Default()
	ops := []idem.Operation{createBusiness, showBusiness}
	tokens := httpapi.NewTokens(map[string]idem.Principal{
		"s3cr3t": {Org: "acme", ID: "onboarding-agent", Kind: idem.KindAgent},
	})
	jwtAuth, err := jwtauth.New(ctx, jwtauth.Config{
		JWKSURL:  "https://login.example.com/.well-known/jwks.json",
		Issuer:   "https://login.example.com/",
		Audience: "https://idem.example.com",
	})
	if err != nil {
		log.Fatal(err)
	}
	tp, shutdown, err := telemetry.FromEnv(ctx, "1.0.0") // nil tp: tracing off
	if err != nil {
		log.Fatal(err)
	}
	defer shutdown(context.Background())

	store, err := server.OpenStore(ctx, "sqlite:app-idem.db", idem.StoreConfig{}, logger) // or postgres://…
	if err != nil {
		log.Fatal(err)
	}
	auth := idem.Authenticators{tokens, jwtAuth} // docs/auth.md
	srv, err := server.New(ctx, server.Config{
		Operations: ops, // idem.Define / idem.DefineRaw
		Store:      store,
		Auth:       auth,
		Logger:     logger,                    // nil: silent
		BasePath:   "/idem",                   // where Handler is mounted; "" at the root
		PublicURL:  "https://app.example.com", // the origin clients call (docs/auth.md, "Discovery")
		Runner: pipeline.Config{
			TracerProvider: tp,   // nil: no tracing (docs/tracing.md)
			ReplayLogRate:  0.01, // log 1 % of successful replays
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/idem/", http.StripPrefix("/idem", srv.Handler()))

	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	httpServer := server.NewHTTPServer(mux, logger)
	if err := srv.Start(ctx); err != nil { // the sweeper and the completion feed begin
		log.Fatal(err)
	}
	go httpServer.Serve(ln)
	<-ctx.Done() // SIGINT or SIGTERM
	stopCtx, cancel := context.WithTimeout(context.Background(), srv.ShutdownBound())
	defer cancel()
	httpServer.Shutdown(stopCtx) // no new requests; running executions finish
	srv.Stop(stopCtx)            // MCP streams end, background work ends, queued audit events are written
	store.Close()
}

// An API-only service: its idempotent operations and its own routes from
// one handler, under one lifecycle, without MCP, metrics or the console
// (docs/embedding.md, "API only"). It is compiled, not run (it listens on
// a port).
func Example_apiOnly() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := server.OpenStore(ctx, "sqlite:orders-idem.db", idem.StoreConfig{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	srv, err := server.New(ctx, server.Config{
		Operations: []idem.Operation{createBusiness, showBusiness},
		Store:      store,
		Auth: httpapi.NewTokens(map[string]idem.Principal{
			"s3cr3t": {Org: "acme", ID: "billing", Kind: idem.KindAgent},
		}),
		NoMCP:     true, // no /mcp
		NoMetrics: true, // no /metrics
		NoConsole: true, // no /ui/
		Handlers: map[string]http.Handler{ // the service's own routes, beside idem's
			"GET /status": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("ok"))
			}),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	// Start, serve, and a graceful stop on SIGINT or SIGTERM, in one call.
	if err := srv.Serve(ctx, ln); err != nil {
		log.Fatal(err)
	}
}

// CodeSlugTaken is a business outcome of the application's own
// (docs/embedding.md, "Business errors").
const CodeSlugTaken idem.Code = "SLUG_TAKEN"

func init() {
	idem.RegisterCodes(map[idem.Code]idem.CodeInfo{
		CodeSlugTaken: {Status: http.StatusConflict, Title: "Slug taken",
			Action: "Choose another name, or use business.show."},
	})
}

var createBusiness = idem.Define(idem.Metadata{
	Name: "business.create", Method: "POST", Path: "/v1/orgs/{org}/businesses",
	Summary: "Create a business", SideEffect: idem.SideEffectWrite,
	Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "business.show",
		Rationale: "Creating twice would make two businesses; a same-key retry replays the first answer."},
	Errors: []idem.DeclaredError{idem.Declare(CodeSlugTaken, "A business with this slug exists.")},
}, func(ctx context.Context, call *idem.Call, in businessIn) (business, error) {
	slug := slugOf(in.Name)
	if taken[slug] {
		return business{}, idem.Errorf(CodeSlugTaken, "a business with slug %q already exists", slug)
	}
	return business{Slug: slug, Name: in.Name}, nil
})

type businessIn struct {
	Org  string `json:"org" in:"path"`
	Name string `json:"name" jsonschema:"minLength=1,maxLength=80"`
}

type business struct {
	Slug string `json:"slug"`
	Name string `json:"name"`
}

var taken = map[string]bool{"corner-bakery": true}

var showBusiness = idem.Define(idem.Metadata{
	Name: "business.show", Method: "GET", Path: "/v1/orgs/{org}/businesses/{slug}",
	Summary: "Show a business", SideEffect: idem.SideEffectRead,
}, func(ctx context.Context, call *idem.Call, in struct {
	Org  string `json:"org" in:"path"`
	Slug string `json:"slug" in:"path"`
}) (business, error) {
	return business{Slug: in.Slug}, nil
})

func slugOf(name string) string { return name }

// refundIn declares a header input (docs/operations.md).
type refundIn struct {
	ID     string `json:"id" in:"path"`
	Tenant string `json:"tenant" in:"header" header:"X-Tenant"`
	Amount int    `json:"amount"`
}

// createFromGo calls an operation from Go and reads the typed answer
// (docs/runtime.md, "The answer").
func createFromGo(ctx context.Context, runner *pipeline.Runner, req idem.Invocation) (bool, error) {
	res := runner.Call(ctx, req)
	var b business
	if err := res.Decode(&b); err != nil { // the problem, as an *idem.Error
		return false, err // idem.ErrorCode(err) is its code, e.g. IDEMPOTENCY_KEY_IN_FLIGHT
	}
	replayed := res.Replayed // or res.Meta.Idempotency.Replayed
	return replayed, nil
}

// runWithTracing builds a runner traced as the OTEL_* environment says
// (docs/tracing.md).
func runWithTracing(ctx context.Context, version string, reg *idem.Registry, store idem.Store) error {
	tp, shutdown, err := telemetry.FromEnv(ctx, version) // nil tp: tracing off
	if err != nil {
		return err
	}
	defer shutdown(context.Background())
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, TracerProvider: tp})
	if err != nil {
		return err
	}
	return serveUntilDone(ctx, runner)
}

func serveUntilDone(ctx context.Context, runner *pipeline.Runner) error {
	if err := runner.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(runner.Stop(stop), ctx.Err())
}

var _ = []any{refundIn{}, createFromGo, runWithTracing}
