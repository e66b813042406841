// Command embed is an existing service that embeds idem: its own routes
// and middleware on its own http.ServeMux, idem's operations mounted under
// /idem/, callers authenticated with JWTs from an identity provider's JWKS
// (and a service token), traces exported over OTLP when the OTEL_*
// environment asks for it, and a clean shutdown on SIGINT or SIGTERM.
//
// It uses idem's exported API only, as a module outside idem's would:
//
//	go run . --addr 127.0.0.1:8090 --store embed.db \
//	    --jwks-url https://login.example.com/.well-known/jwks.json \
//	    --jwt-issuer https://login.example.com/ --jwt-audience notes
//
// docs/embedding.md walks through it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/jwtauth"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on")
	storePath := flag.String("store", "embed.db", "SQLite file of idem's keys and executions")
	jwksURL := flag.String("jwks-url", "", "the identity provider's JWKS URL")
	issuer := flag.String("jwt-issuer", "", "the iss a JWT must carry")
	audience := flag.String("jwt-audience", "", "the aud a JWT must include")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	tracing, err := setupTracing(ctx)
	if err != nil {
		return err
	}
	defer tracing.shutdown()

	store, err := sqlitestore.Open(ctx, *storePath, idem.StoreConfig{})
	if err != nil {
		return err
	}
	defer store.Close()

	// Identity: the service's own token, then JWTs from the provider.
	tokens := httpapi.NewTokens(nil)
	if t := os.Getenv("EMBED_SERVICE_TOKEN"); t != "" {
		tokens.Add(t, idem.Principal{Org: "acme", ID: "billing-service", Kind: idem.KindServiceAccount})
	}
	auth := idem.Authenticators{tokens}
	if *jwksURL != "" {
		jwt, err := jwtauth.New(ctx, jwtauth.Config{JWKSURL: *jwksURL, Issuer: *issuer, Audience: *audience})
		if err != nil {
			return err
		}
		auth = append(auth, jwt)
	}

	notes := &notebook{byID: map[string]note{}}
	srv, err := server.New(ctx, server.Config{
		Operations: notes.operations(), Store: store, Auth: auth, Logger: logger, BasePath: "/idem",
		Runner: pipeline.Config{TracerProvider: tracing.provider},
	})
	if err != nil {
		return err
	}

	// The service's own routes and middleware, with idem beside them.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello from the notes service") })
	mux.Handle("/idem/", http.StripPrefix("/idem", srv.Handler()))
	hs := server.NewHTTPServer(recovered(accessLog(logger, mux), logger), logger)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil { // the sweeper, the completion feed
		return err
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Shut down in order: no new requests, running executions finish
	// within their bound, then idem's background work and audit queue.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), srv.ShutdownBound())
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if err := srv.Stop(shutdownCtx); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "stopped cleanly")
	return nil
}

// accessLog is the service's own request log.
func accessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		log.Info("access", "method", r.Method, "path", r.URL.Path, "ms", time.Since(start).Milliseconds())
	})
}

// recovered is the service's own panic recovery.
func recovered(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				log.Error("panic", "value", fmt.Sprint(v))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// notebook is the service's own state: notes in memory.
type notebook struct {
	mu   sync.Mutex
	byID map[string]note
	n    int
}

type note struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	By   string `json:"by"`
}

type createIn struct {
	Text string `json:"text" jsonschema:"minLength=1,maxLength=500"`
}

type showIn struct {
	ID string `json:"id" in:"path"`
}

func (nb *notebook) operations() []idem.Operation {
	create := idem.Define(idem.Metadata{
		Name: "note.create", Method: "POST", Path: "/v1/notes", Summary: "Write a note",
		SideEffect: idem.SideEffectWrite, SuccessStatus: http.StatusCreated,
		Retry: idem.RetryContract{
			Kind: idem.RetrySameKeyReplay, Reconcile: "note.show",
			Rationale: "Writing twice would make two notes; a same-key retry replays the first answer.",
		},
	}, func(ctx context.Context, call *idem.Call, in createIn) (note, error) {
		nb.mu.Lock()
		defer nb.mu.Unlock()
		nb.n++
		n := note{ID: fmt.Sprintf("note_%d", nb.n), Text: strings.TrimSpace(in.Text), By: call.Principal.ID}
		nb.byID[n.ID] = n
		return n, nil
	})
	show := idem.Define(idem.Metadata{
		Name: "note.show", Method: "GET", Path: "/v1/notes/{id}", Summary: "Show a note", SideEffect: idem.SideEffectRead,
	}, func(ctx context.Context, call *idem.Call, in showIn) (note, error) {
		nb.mu.Lock()
		defer nb.mu.Unlock()
		n, ok := nb.byID[in.ID]
		if !ok {
			return note{}, idem.Errorf(idem.CodeNotFound, "no note %s", in.ID)
		}
		return n, nil
	})
	return []idem.Operation{create, show}
}
