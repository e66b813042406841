package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/policyfile"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
	"github.com/idem-run/idem/telemetry"
)

// serveOptions are the flags of idem serve (SPEC §10.3).
type serveOptions struct {
	addr           string
	store          string
	storeTimeout   time.Duration
	secretKeyFile  string
	tokensFile     string
	retention      time.Duration
	auditRetention time.Duration
	secretWindow   time.Duration
	leaseGrace     time.Duration
	approvalExpiry time.Duration
	sweepInterval  time.Duration
	replayCacheMB  int
	allowedOrigins string
	publicURL      string
	decodeBudgetMB int
	maxExecutions  int
	admissionWait  time.Duration
	logLevel       string
	logReplays     float64
	jwt            jwtOptions
	policies       string
	demo           bool
	// webhookLoopback lets the demo's webhooks deliver to loopback
	// addresses (docs/webhooks.md, Destinations).
	webhookLoopback bool
}

func (m Main) serveCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the operations over HTTP",
		Long: "Serve the HTTP API, the operations catalog (GET /v1/operations) and the OpenAPI document\n" +
			"(GET /openapi.json) on one store. Several instances may share a PostgreSQL store.\n\n" +
			"Tracing: the standard OpenTelemetry environment turns on OTLP trace export, e.g.\n" +
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 (OTEL_TRACES_EXPORTER=otlp|console|none,\n" +
			"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf|grpc, OTEL_SERVICE_NAME; docs/tracing.md). Off by default.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m.defaults(&o)
			return m.serve(cmd.Context(), o, o.demoApplication)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.BoolVar(&o.demo, "demo", false, "serve the reference application of SPEC §12 with its demo tokens")
	f.BoolVar(&o.webhookLoopback, "webhook-loopback", false, "with --demo, deliver webhooks to loopback addresses too (127.0.0.1, ::1: a local receiver such as idem webhook listen); without it such a delivery is refused before connecting, so that callers cannot probe this host's ports")
	return cmd
}

// flags declares the flags idem serve and idem proxy share.
func (o *serveOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "", "address to listen on (env IDEM_ADDR; default 127.0.0.1:8080)")
	f.StringVar(&o.store, "store", "", "store URL: sqlite:PATH or postgres://… (env IDEM_STORE; default "+defaultStore+")")
	f.DurationVar(&o.storeTimeout, "store-connect-timeout", defaultStoreTimeout, storeTimeoutHelp)
	f.StringVar(&o.secretKeyFile, "secret-key-file", "", "key file sealing one-time secret results, created 0600 if absent (env IDEM_SECRET_KEY_FILE; default idem.key)")
	f.StringVar(&o.tokensFile, "tokens-file", "", "file of hashed bearer tokens, one per line: sha256:HEX ORG PRINCIPAL KIND [ROLES] (env IDEM_TOKENS_FILE)")
	f.DurationVar(&o.retention, "retention", 24*time.Hour, "how long attempt records are kept; must exceed the longest lease of any operation plus 1 s")
	f.DurationVar(&o.auditRetention, "audit-retention", 7*24*time.Hour, "how long executions and their audit events are kept after they start; at least --retention")
	f.DurationVar(&o.secretWindow, "secret-window", 15*time.Minute, "how long a one-time secret result can be replayed")
	f.DurationVar(&o.leaseGrace, "lease-grace", 5*time.Second, "grace added to an execution's bound before an in-flight record reads as indeterminate")
	f.DurationVar(&o.approvalExpiry, "approval-expiry", 15*time.Minute, "how long an approval stays decidable and usable")
	f.IntVar(&o.replayCacheMB, "replay-cache-mb", pipeline.DefaultReplayCacheBytes>>20, "MiB of memory for completed records that answer replays without a store read (0 turns the cache off)")
	f.StringVar(&o.allowedOrigins, "allowed-origins", "", "comma-separated origins (https://app.example.com) besides the server's own whose browser pages may call /mcp; any other Origin is refused (env IDEM_ALLOWED_ORIGINS)")
	f.StringVar(&o.publicURL, "public-url", "", "the origin clients reach this server at, https://idem.example.com (env IDEM_PUBLIC_URL): with --jwks-url, the protected resource metadata that tells an MCP client where to get a token (/.well-known/oauth-protected-resource) is built on it; without it, only for requests to a loopback host")
	f.IntVar(&o.decodeBudgetMB, "decode-budget-mb", pipeline.DefaultDecodeBudget>>20, "MiB of request bodies read and decoded at once: a body's share starts at 1 KiB and grows as its bytes arrive (at most about twice what it has sent), and once read it counts 16 bytes a JSON value when that is more than its bytes; beyond the budget a request waits --admission-wait, then answers 429 RATE_LIMITED, nothing stored (0: no bound)")
	f.IntVar(&o.maxExecutions, "max-executions", pipeline.DefaultMaxExecutions, "executions (handlers and previews) running at once; beyond it a request answers 429 RATE_LIMITED before anything is stored (0: no bound)")
	f.DurationVar(&o.admissionWait, "admission-wait", pipeline.DefaultAdmissionWait, "how long a request beyond --decode-budget-mb or --max-executions waits for room, first come first served, before it answers 429 (0: answer at once)")
	f.StringVar(&o.logLevel, "log-level", "info", "least level logged: debug, info, warn or error (one JSON line per execution at info, failures at warn)")
	f.Float64Var(&o.logReplays, "log-replays", 1, "share of successful replays that get a log line, 0 to 1 (under a retry storm the line is most of a replay's cost)")
	o.jwt.flags(f)
	f.StringVar(&o.policies, "policies", "", "YAML file of policies and rate limits (SPEC §8.1, docs/policies.md), compiled against the operations at start (a file that does not compile is refused: nothing is served) and again on SIGHUP (a broken file keeps the running rules)")
	f.DurationVar(&o.sweepInterval, "sweep-interval", 30*time.Second, "how often this instance sweeps: forgets records past retention, destroys expired secrets, marks passed leases and approvals expired, removes executions past --audit-retention (jittered ± half)")
}

// defaults fills the options from the environment where their flags were
// not given.
func (m Main) defaults(o *serveOptions) {
	o.store = m.storeFlagValue(o.store)
	if o.addr == "" {
		o.addr = m.envOr("IDEM_ADDR", "127.0.0.1:8080")
	}
	if o.secretKeyFile == "" {
		o.secretKeyFile = m.envOr("IDEM_SECRET_KEY_FILE", "idem.key")
	}
	if o.tokensFile == "" {
		o.tokensFile = m.Getenv("IDEM_TOKENS_FILE")
	}
	if o.allowedOrigins == "" {
		o.allowedOrigins = m.Getenv("IDEM_ALLOWED_ORIGINS")
	}
	if o.publicURL == "" {
		o.publicURL = m.Getenv("IDEM_PUBLIC_URL")
	}
	m.jwtDefaults(&o.jwt)
}

func (m Main) envOr(name, def string) string {
	if v := m.Getenv(name); v != "" {
		return v
	}
	return def
}

// serve runs the server until ctx ends, then shuts down gracefully
// (server.Server.Serve). build makes what it serves once the store is
// open.
func (m Main) serve(ctx context.Context, o serveOptions, build func(context.Context, idem.Store, *secretbox.Box, *slog.Logger) (application, error)) error {
	for name, n := range map[string]int{"--replay-cache-mb": o.replayCacheMB, "--decode-budget-mb": o.decodeBudgetMB, "--max-executions": o.maxExecutions} {
		if n < 0 {
			return usagef("%s must be 0 or more, got %d", name, n)
		}
	}
	if o.admissionWait < 0 {
		return usagef("--admission-wait must be 0 or more, got %s", o.admissionWait)
	}
	if o.storeTimeout < 0 {
		return usagef("--store-connect-timeout must be 0 (no bound) or more, got %s", o.storeTimeout)
	}
	for name, d := range map[string]time.Duration{"--retention": o.retention, "--secret-window": o.secretWindow, "--lease-grace": o.leaseGrace, "--approval-expiry": o.approvalExpiry, "--sweep-interval": o.sweepInterval} {
		if d <= 0 {
			return usagef("%s must be positive, got %s", name, d)
		}
	}
	if o.auditRetention < o.retention {
		return usagef("--audit-retention %s is shorter than --retention %s: executions must outlive the attempt records that name them; give --audit-retention %s or more (default 168h)",
			o.auditRetention, o.retention, o.retention)
	}
	origins, err := allowedOrigins(o.allowedOrigins)
	if err != nil {
		return err
	}
	if o.publicURL != "" {
		if _, err := httpapi.PublicOrigin(o.publicURL); err != nil {
			return usagef("--public-url: %v", err)
		}
	}
	logger, err := o.logger(m.Stderr)
	if err != nil {
		return err
	}
	// Every check that needs no store comes first, so that a refusal
	// leaves nothing behind: no store file, no key file.
	tokens, err := m.tokens(o.tokensFile)
	if err != nil {
		return err
	}
	if err := secretbox.CheckKeyFile(o.secretKeyFile); err != nil {
		return fmt.Errorf("--secret-key-file: %w", err)
	}
	ln, err := listen(o.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	opened, err := openStore(ctx, o.store, idem.StoreConfig{ConnectTimeout: o.storeTimeout}, logger)
	if err != nil {
		return fmt.Errorf("open store %s: %w", redact(o.store), err)
	}
	defer opened.Close()
	box, err := secretbox.LoadOrCreateKeyFile(o.secretKeyFile)
	if err != nil {
		return err
	}
	app, err := build(ctx, opened, box, logger)
	if err != nil {
		return err
	}
	if app.close != nil {
		defer app.close()
	}
	for token, p := range app.tokens {
		tokens.Add(token, p)
	}
	auth := idem.Authenticators{tokens}
	jwtAuth, err := o.jwt.authenticator(ctx)
	if err != nil {
		return err
	}
	if jwtAuth != nil {
		auth = append(auth, jwtAuth)
		logJWT(logger, jwtAuth, o.publicURL)
	}
	if tokens.Len() == 0 && jwtAuth == nil {
		logger.Warn("no caller can authenticate: no token is known, so every operation, approval, execution and attempt route and /mcp answer 401; " +
			"give --tokens-file FILE (or IDEM_TOKENS_FILE) with lines sha256:HEX ORG PRINCIPAL KIND [ROLES], --jwks-url with --jwt-issuer and --jwt-audience for JWTs, or run --demo for the demo tokens")
	}
	registry, err := idem.NewRegistry(app.operations...)
	if err != nil {
		return err
	}
	if len(app.operations) == 0 && !app.proxied {
		logger.Warn("serving no operations: idem serve declares none of its own; " +
			"run idem serve --demo for the reference application, declare yours in Go and serve them from your service (docs/embedding.md), " +
			"or put idem in front of an HTTP API with idem proxy (docs/proxy.md) or of an MCP server with idem gateway (docs/gateway.md)")
	}
	if pipeline.CheckRetention(registry, o.retention, o.leaseGrace, pipeline.DefaultLeaseMargin) != nil {
		name, lease := registry.LongestLease(o.leaseGrace)
		return usagef("--retention %s must exceed the longest lease of any operation plus the lease margin of %s: operation %s holds its lease for %s with --lease-grace %s; raise --retention above %s (or lower --lease-grace)",
			o.retention, pipeline.DefaultLeaseMargin, name, lease, o.leaseGrace, lease+pipeline.DefaultLeaseMargin)
	}
	tracerProvider, stopTracing, err := telemetry.FromEnv(ctx, buildVersion())
	if err != nil {
		return err
	}
	defer func() {
		// After the server stopped: export the spans still batched.
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(tctx); err != nil {
			logger.Warn("traces not exported at exit", "error", err)
		}
	}()
	if tracerProvider != nil {
		logger.Info("tracing on: exporting OpenTelemetry traces as the OTEL_* environment says")
	}
	srv, err := server.New(ctx, server.Config{
		Operations: app.operations, Store: opened, Auth: auth, Logger: logger,
		Runner: pipeline.Config{
			Sealer: box, Policies: app.policies,
			Retention: o.retention, SecretWindow: o.secretWindow, LeaseGrace: o.leaseGrace, ApprovalExpiry: o.approvalExpiry,
			ReplayCacheBytes: replayCacheBytes(o.replayCacheMB),
			DecodeBudget:     int64(unbounded(o.decodeBudgetMB)) << 20, MaxExecutions: unbounded(o.maxExecutions),
			AdmissionWait: admissionWait(o.admissionWait), SweepInterval: o.sweepInterval, AuditRetention: o.auditRetention,
			ReplayLogRate: o.logReplays, TracerProvider: tracerProvider,
		},
		AllowedOrigins: origins, PublicURL: o.publicURL, Routes: app.routes, OpenAPI: app.openapi, NoDirectCLIOperations: app.proxied,
		MCPForward: app.mcpForward,
		Readiness:  app.readiness,
		Version:    buildVersion(),
	})
	if err != nil {
		return err
	}
	pol := &policies{path: o.policies, upstream: app.upstream, srv: srv, logger: logger}
	if app.configRules {
		pol.put(app.rules, app.rulesSource)
	}
	if o.policies != "" {
		if err := pol.load(); err != nil {
			return err
		}
		if app.reload != nil {
			app.afterReload = pol.reload // SIGHUP reloads both
		} else {
			go pol.reloadOnHangup(ctx)
		}
	}
	if app.reload != nil {
		go reloadLoop(ctx, srv, app, pol, logger)
	}
	addr := ln.Addr().String()
	writeHeapProfile(m.Getenv("IDEM_HEAPPROFILE"), m.Stderr)
	fmt.Fprintf(m.Stderr, "listening on http://%s\n", addr)
	logger.Info("serving", "addr", addr, "store", redact(o.store), "operations", len(registry.Names()), "secretKeyId", box.KeyID())
	return srv.Serve(ctx, ln)
}

// listen binds addr before the store or the key file is opened, so that
// a busy address refuses the start-up with nothing created, saying what to
// do.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen on %s: the address is already in use (an idem serve still running?): stop what listens there, "+
			"or give another --addr (or IDEM_ADDR), e.g. --addr 127.0.0.1:0 for any free port", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (check --addr or IDEM_ADDR)", addr, err)
	}
	return ln, nil
}

// logger is the server's JSON logger on w at --log-level.
func (o serveOptions) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	if o.logReplays < 0 || o.logReplays > 1 {
		return nil, usagef("--log-replays must be between 0 and 1, got %g", o.logReplays)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})), nil
}

// allowedOrigins parses --allowed-origins.
func allowedOrigins(list string) ([]string, error) {
	var out []string
	for o := range strings.SplitSeq(list, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		n, err := mcpserver.NormalizeOrigin(o)
		if err != nil {
			return nil, usagef("--allowed-origins: %v", err)
		}
		out = append(out, n)
	}
	return out, nil
}

// replayCacheBytes maps --replay-cache-mb to pipeline.Config.ReplayCacheBytes
// (0 MiB: off, which the config spells negative).
func replayCacheBytes(mb int) int {
	if mb == 0 {
		return -1
	}
	return mb << 20
}

// unbounded maps a flag's 0 (no bound) to the pipeline.Config's spelling,
// negative.
func unbounded(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// admissionWait maps --admission-wait to pipeline.Config.AdmissionWait (0:
// answer at once, which the config spells negative).
func admissionWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// application is what the binary serves besides idem's own routes: the
// reference application with --demo, nothing otherwise (idem serve), or
// the upstream's operations (idem proxy).
type application struct {
	operations []idem.Operation
	policies   []idem.Policy
	routes     map[string]func(http.ResponseWriter, *http.Request, idem.Principal)
	// tokens are accepted besides the tokens file's (the demo tokens).
	tokens map[string]idem.Principal
	// openapi replaces the document built from the operations.
	openapi []byte
	// reload, when set, declares the operations again (idem proxy: the
	// document re-read) on SIGHUP and every reloadEvery (when positive).
	reload      func(context.Context) (application, error)
	reloadEvery time.Duration
	// reloadNow, when set, asks for a reload at once, saying why (idem
	// gateway: an upstream's tools/list_changed, its config file changed).
	reloadNow <-chan string
	// committed, when set on what reload returned, is told whether the
	// server took it (nil) or refused it.
	committed func(error)
	// afterReload, when set, is called after the operations reloaded
	// (--policies: the rules compile again against them).
	afterReload func(why string)
	// upstream names an operation's upstream for the policies'
	// operation.upstream; nil: none.
	upstream func(operation string) string
	// configRules: the application is the source of the configured rules
	// (idem gateway --config's policies: and limits:): rules, compiled
	// against operations (nil: none), replace the running ones when
	// operations are put in place. rulesSource names them in the log.
	configRules bool
	rules       *policyfile.Set
	rulesSource string
	// proxied: the operations are an upstream's (idem proxy, idem gateway), so the
	// catalog lists no direct CLI operations.
	proxied bool
	// readiness adds facts to GET /readyz (idem gateway: its upstreams).
	readiness func(context.Context) map[string]any
	// mcpForward serves resources, prompts and completions on /mcp (idem
	// gateway: the upstreams').
	mcpForward mcpserver.Forwarder
	close      func()
}

// demoApplication is idem serve's application: the reference application
// with --demo, nothing otherwise.
func (o serveOptions) demoApplication(ctx context.Context, opened idem.Store, box *secretbox.Box, _ *slog.Logger) (application, error) {
	if !o.demo {
		return application{}, nil
	}
	cfg := demo.Config{Sealer: box, WebhookLoopback: o.webhookLoopback}
	if sq, ok := opened.(*sqlitestore.Store); ok {
		cfg.Writer = sq.Write // one writer for the file: shared group commit
	}
	d, err := demo.Open(ctx, o.store, cfg)
	if err != nil {
		return application{}, fmt.Errorf("demo: %w", err)
	}
	return application{operations: d.Operations(), policies: d.Policies(), routes: d.Routes(), tokens: demo.Tokens(), close: func() { d.Close() }}, nil
}

// tokens loads the tokens file; without one, no token is accepted unless
// --demo adds the demo tokens.
func (m Main) tokens(path string) (*httpapi.Tokens, error) {
	if path == "" {
		return httpapi.NewTokens(nil), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	return httpapi.ReadTokensFile(f)
}
