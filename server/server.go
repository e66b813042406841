// Package server assembles idem's surfaces over one Runner and owns their
// lifecycle: the HTTP API (catalog, OpenAPI, approvals, executions,
// attempts, health, metrics), MCP over streamable HTTP at /mcp, and the
// web console at /ui/, with the Runner's background work (the sweeper,
// the completion feed, the replay-audit queue).
//
// idem serve and idem proxy are thin callers of it; an application embeds
// idem the same way:
//
//	srv, err := server.New(ctx, server.Config{Operations: ops, Store: store, Auth: auth})
//	…
//	mux.Handle("/idem/", http.StripPrefix("/idem", srv.Handler()))
//	srv.Start(ctx)
//	defer srv.Stop(context.Background())
//
// or, to own a listener too, srv.Serve(ctx, ln), which returns once ctx
// ended and everything stopped.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/metrics"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/webui"
)

// Config is what New needs. Store and Auth are required.
type Config struct {
	// Operations are served on every surface they declare.
	Operations []idem.Operation
	// Store holds keys, executions and approvals (sqlitestore, pgstore;
	// OpenStore opens one from a URL). The server does not close it.
	Store idem.Store
	// Auth decides who calls, on the HTTP API, MCP and the console.
	Auth idem.Authenticator
	// Runner configures the pipeline. Its Store, Logger and Observe are
	// the server's (a given Observe is called too).
	Runner pipeline.Config
	// Logger gets the server's lines and the Runner's; nil is silent.
	Logger *slog.Logger
	// Metrics is the Prometheus registry idem registers its metrics in and
	// serves at GET /metrics; a new one (with the Go and process
	// collectors) when nil.
	Metrics *prometheus.Registry
	// AllowedOrigins are origins besides the server's own whose browser
	// pages may call /mcp (SPEC §10.2).
	AllowedOrigins []string
	// Routes are extra authenticated HTTP routes ("METHOD /path") served
	// beside the operations (the demo's gateway simulator).
	Routes map[string]func(http.ResponseWriter, *http.Request, idem.Principal)
	// OpenAPI, when set, is served instead of the document built from the
	// operations (idem proxy serves its upstream's).
	OpenAPI []byte
	// NoDirectCLIOperations: the catalog lists no directCliOperations
	// (idem proxy: the operations are an upstream's).
	NoDirectCLIOperations bool
	// MCPForward serves resources, prompts and completions on /mcp from
	// the MCP server(s) idem fronts (idem gateway); none when nil.
	MCPForward mcpserver.Forwarder
	// BasePath is the prefix Handler is mounted under with
	// http.StripPrefix ("/idem"; empty at the root). The OpenAPI document
	// says it, and the console's links, redirects and cookie carry it
	// (pages at /idem/ui/…).
	BasePath string
	// PublicURL is the origin clients reach the server at,
	// scheme://host[:port] (the base path is BasePath). When Auth accepts
	// the tokens of an authorization server (idem.TokenIssuers: jwtauth),
	// the protected resource metadata (RFC 9728) and the resource_metadata
	// of every 401 are built on it; without it they are built on a
	// request's own Host only when that is a loopback host (docs/auth.md).
	PublicURL string
	// Readiness, when set, adds facts to GET /readyz (httpapi.Config).
	Readiness func(context.Context) map[string]any
	// NoConsole leaves the web console out.
	NoConsole bool
	// NoMCP leaves MCP (/mcp) out: no MCP server is built.
	NoMCP bool
	// NoMetrics leaves GET /metrics out (Metrics, when set, is not
	// served either).
	NoMetrics bool
	// Handlers are the service's own routes, served by Handler beside
	// idem's under the same lifecycle (Serve): http.ServeMux patterns
	// ("GET /status", "/static/") to handlers, which idem neither
	// authenticates nor wraps. A pattern that would take or shadow one of
	// idem's routes or an operation's is refused by New (and such an
	// operation by Reload). Routes, by
	// contrast, are authenticated by Auth.
	Handlers map[string]http.Handler
	// Version names the API (OpenAPI info.version, MCP server version).
	Version string
}

// Server is idem's surfaces over one Runner. Handler serves them; Start
// and Stop run the background work; Serve does both around a listener.
type Server struct {
	cfg    Config
	log    *slog.Logger
	runner *pipeline.Runner
	// http is the HTTP API's configuration, kept to rebuild the handler
	// on Reload.
	http     httpapi.Config
	api      swappable
	mcp      *mcpserver.HTTPHandler
	handler  http.Handler
	routes   routeTemplates // for the HTTP server spans (tracing.go)
	reloadMu sync.Mutex     // one Reload at a time
	tools    tools
	// resource is the server as an OAuth protected resource; nil when
	// Auth names no authorization server.
	resource *httpapi.ProtectedResource
}

// tools is the MCP server and what it lists.
type tools struct {
	srv       *mcp.Server
	backend   mcpserver.RunnerBackend
	published mcpserver.Published
}

// ownRoutes are the paths the server serves before the HTTP API's.
var ownRoutes = []string{"/mcp", "/mcp/", webui.Prefix, strings.TrimSuffix(webui.Prefix, "/"), httpapi.WellKnownProtectedResource, httpapi.WellKnownProtectedResource + mcpPath}

// mcpPath is where MCP is served, under the handler.
const mcpPath = "/mcp"

// New checks cfg and builds the Runner and the surfaces. Nothing runs in
// the background until Start (or Serve).
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: Config.Store is required")
	}
	if cfg.Auth == nil {
		return nil, errors.New("server: Config.Auth is required (httpapi.NewTokens(nil) accepts nobody)")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := cfg.Metrics
	switch {
	case cfg.NoMetrics:
		reg = prometheus.NewRegistry() // counted, never served
	case reg == nil:
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	mx := metrics.New(reg)
	if ws, ok := cfg.Store.(metrics.WriteStatser); ok {
		metrics.RegisterWriteStats(reg, ws)
	}
	registry, err := idem.NewRegistry(cfg.Operations...)
	if err != nil {
		return nil, err
	}
	rc := cfg.Runner
	// The runner wraps the store once, for its spans and these latencies.
	rc.Store, rc.Logger = cfg.Store, log
	rc.StoreHook = idem.ChainStoreHooks(mx.StoreHook(), rc.StoreHook)
	if observe := rc.Observe; observe != nil {
		rc.Observe = func(r pipeline.Report) { mx.Observe(r); observe(r) }
	} else {
		rc.Observe = mx.Observe
	}
	runner, err := pipeline.New(registry, rc)
	if err != nil {
		return nil, err
	}
	metrics.RegisterAuditDropped(reg, runner)
	metrics.RegisterReplayCache(reg, runner)
	if err := httpapi.CheckRoutes(runner.Descriptors(), ownRoutes...); err != nil {
		return nil, err
	}
	if err := checkHandlers(cfg.Handlers, runner.Descriptors()); err != nil {
		return nil, err
	}
	var resource *httpapi.ProtectedResource
	if issuers := idem.AuthorizationServersOf(cfg.Auth); len(issuers) > 0 {
		if resource, err = httpapi.NewProtectedResource(httpapi.ProtectedResourceConfig{
			AuthorizationServers: issuers, PublicURL: cfg.PublicURL, BasePath: cfg.BasePath,
		}); err != nil {
			return nil, fmt.Errorf("server: Config.PublicURL: %w", err)
		}
	}
	s := &Server{cfg: cfg, log: log, runner: runner, resource: resource}
	s.http = httpapi.Config{
		Runner: runner, Store: mx.Store(cfg.Store), Auth: cfg.Auth, Logger: log, Version: cfg.Version,
		Routes: cfg.Routes, OpenAPI: cfg.OpenAPI, NoDirectCLIOperations: cfg.NoDirectCLIOperations, BasePath: cfg.BasePath,
		ProtectedResource: resource, Readiness: cfg.Readiness,
	}
	if !cfg.NoMetrics {
		s.http.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	s.api.Store(httpapi.NewHandler(s.http))
	mux := http.NewServeMux()
	if !cfg.NoMCP {
		backend := mcpserver.RunnerBackend{Runner: runner}
		mcpSrv, err := mcpserver.New(ctx, backend, mcpserver.Options{Version: cfg.Version, Forward: cfg.MCPForward, ReadLog: log})
		if err != nil {
			return nil, err
		}
		published, err := mcpserver.PublishedOf(ctx, backend)
		if err != nil {
			return nil, err
		}
		s.tools = tools{srv: mcpSrv, backend: backend, published: published}
		s.mcp = mcpserver.Handler(mcpSrv, cfg.Auth, mcpserver.HTTPOptions{
			AllowedOrigins: cfg.AllowedOrigins,
			Challenge:      func(r *http.Request) string { return resource.Challenge(r, mcpPath) },
		})
		mux.Handle(mcpPath, s.mcp)
		mux.Handle(mcpPath+"/", s.mcp)
	}
	if resource != nil {
		// Only with an authorization server to name: a tokens file's
		// tokens come from none, so there is nothing to discover.
		mux.Handle(httpapi.WellKnownProtectedResource, resource.MetadataHandler(""))
		mux.Handle(httpapi.WellKnownProtectedResource+mcpPath, resource.MetadataHandler(mcpPath))
	}
	if !cfg.NoConsole {
		console := webui.New(webui.Config{Runner: runner, Auth: cfg.Auth, Logger: log, BasePath: cfg.BasePath})
		mux.Handle(webui.Prefix, console)
		mux.Handle(strings.TrimSuffix(webui.Prefix, "/"), console) // its redirect carries the base path
	}
	mux.Handle("/", &s.api)
	for pattern, h := range cfg.Handlers {
		mux.Handle(pattern, h) // checkHandlers made sure it takes none of idem's paths
	}
	s.handler = mux
	if base := strings.TrimRight(cfg.BasePath, "/"); base != "" {
		s.handler = cleanUnder(base, mux)
	}
	if tp := cfg.Runner.TracerProvider; tracing(tp) {
		s.routes.set(runner.Descriptors())
		s.handler = traced(s.handler, tp, &s.routes, strings.TrimRight(cfg.BasePath, "/"))
	}
	return s, nil
}

// cleanUnder redirects a request whose path is not clean ("//", "." or
// ".." segments) to its clean form under base, as http.ServeMux would
// without base: the mux's own redirect names the path it sees, the one
// without the prefix.
func cleanUnder(base string, mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && p != "" {
			if clean := cleanPath(p); clean != p {
				u := url.URL{Path: base + clean, RawPath: base + clean, RawQuery: r.URL.RawQuery}
				if unescaped, err := url.PathUnescape(u.RawPath); err == nil {
					u.Path = unescaped
				}
				http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// cleanPath is http.ServeMux's canonical path: rooted, path.Clean'd, with
// a trailing slash kept.
func cleanPath(p string) string {
	if p[0] != '/' {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// Handler serves every surface: the operations' routes and the HTTP
// API's own, /mcp, and the console at /ui/. Mount it under a prefix with
// http.StripPrefix, naming it in Config.BasePath.
func (s *Server) Handler() http.Handler { return s.handler }

// ProtectedResourceMetadata serves the protected resource metadata (RFC
// 9728) at the host's root, where §3.1 puts it for a server mounted under
// Config.BasePath: /.well-known/oauth-protected-resource followed by the
// base path (the HTTP API) and by the base path and /mcp (MCP). Handler
// serves the same documents under the base path, which is where the 401s
// point; this is for clients that look only at the root. Mount it at
// httpapi.WellKnownProtectedResource+"/"; other paths answer 404. It is
// nil when Auth names no authorization server.
func (s *Server) ProtectedResourceMetadata() http.Handler {
	if s.resource == nil {
		return nil
	}
	base := strings.TrimRight(s.cfg.BasePath, "/")
	mux := http.NewServeMux()
	mux.Handle(httpapi.WellKnownProtectedResource+base, s.resource.MetadataHandler(""))
	mux.Handle(httpapi.WellKnownProtectedResource+base+mcpPath, s.resource.MetadataHandler(mcpPath))
	mux.Handle("/", &s.api) // the API's 404
	return mux
}

// Runner is the pipeline the surfaces call (for Go callers in the same
// process: Runner().Call).
func (s *Server) Runner() *pipeline.Runner { return s.runner }

// Start begins the Runner's background work (pipeline.Runner.Start): the
// sweeper and the completion feed. Call Stop when done.
func (s *Server) Start(ctx context.Context) error { return s.runner.Start(ctx) }

// Stop ends MCP's event streams, the sweeper and the feed, and waits for
// the replay audit events still queued, or for ctx. Stop the HTTP server
// that serves Handler first (http.Server.Shutdown), so that no call is
// still arriving.
func (s *Server) Stop(ctx context.Context) error {
	s.drainMCP()
	return s.runner.Stop(ctx)
}

// drainMCP ends MCP's event streams, when MCP is served.
func (s *Server) drainMCP() {
	if s.mcp != nil {
		s.mcp.Drain()
	}
}

// checkHandlers refuses a pattern of Config.Handlers that ServeMux
// refuses, or that would take a request meant for one of idem's routes or
// an operation's (each tried with every method, its wildcards filled).
func checkHandlers(handlers map[string]http.Handler, descs []idem.Descriptor) (err error) {
	if len(handlers) == 0 {
		return nil
	}
	probe := http.NewServeMux()
	var current string
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("server: Config.Handlers: pattern %q: %v", current, v)
		}
	}()
	for pattern, h := range handlers {
		current = pattern
		probe.Handle(pattern, h)
	}
	type route struct{ path, what string }
	var routes []route
	for _, p := range append(append([]string(nil), ownRoutes...), httpapi.SystemPaths()...) {
		routes = append(routes, route{p, "idem's own route " + p})
	}
	for _, d := range descs {
		p, _ := idem.MuxPattern(d.Path)
		routes = append(routes, route{p, fmt.Sprintf("operation %s (%s %s)", d.Name, d.Method, d.Path)})
	}
	for _, r := range routes {
		concrete := wildcard.ReplaceAllString(r.path, "x")
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
			req := &http.Request{Method: m, URL: &url.URL{Path: concrete}, Host: "localhost"}
			if _, pattern := probe.Handler(req); pattern != "" {
				return fmt.Errorf("server: Config.Handlers: pattern %q takes %s %s, which is %s; serve it under another path", pattern, m, concrete, r.what)
			}
		}
	}
	return nil
}

// wildcard is a ServeMux wildcard segment ({id}, {rest...}).
var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// ShutdownBound is the longest any execution may run: the largest lease
// of the operations served, without grace, and at least 5 s. A graceful
// shutdown waits this long for running executions.
func (s *Server) ShutdownBound() time.Duration {
	_, bound := s.runner.LongestLease(0)
	return max(bound, 5*time.Second)
}

// Reload replaces the operations served (idem proxy re-reading its
// document): checked as New checks them, then the Runner, the HTTP routes,
// the catalog, the OpenAPI document (openapi, or the one built from ops
// when nil) and the MCP tools change together. Calls in flight finish
// under the declarations they started with. On error nothing changes.
func (s *Server) Reload(ctx context.Context, ops []idem.Operation, openapi []byte) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		return err
	}
	if err := httpapi.CheckRoutes(reg.Descriptors(), ownRoutes...); err != nil {
		return err
	}
	if err := checkHandlers(s.cfg.Handlers, reg.Descriptors()); err != nil {
		return err
	}
	if err := s.runner.Reload(reg); err != nil {
		return err
	}
	cfg := s.http
	cfg.OpenAPI = openapi
	s.routes.set(reg.Descriptors())
	s.api.Store(httpapi.NewHandler(cfg))
	if s.tools.srv == nil { // NoMCP
		return nil
	}
	published, err := mcpserver.Update(ctx, s.tools.srv, s.tools.backend, s.tools.published)
	s.tools.published = published
	return err
}

// swappable is an http.Handler that Reload replaces at once: a request is
// served by the handler it found, so the catalog, the OpenAPI document and
// the routes change together.
type swappable struct{ h atomic.Pointer[http.Handler] }

func (s *swappable) Store(h http.Handler) { s.h.Store(&h) }

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }
