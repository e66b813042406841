package main

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/gatewayconfig"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/secretbox"
)

// proxyOptions are the flags of idem proxy (SPEC §15) besides those it
// shares with idem serve.
type proxyOptions struct {
	serveOptions
	upstream     string
	openapi      string
	contracts    string
	validate     bool
	maxStored    int64
	upstreamAuth string
	reloadEvery  time.Duration
}

func (m Main) proxyCommand() *cobra.Command {
	var o proxyOptions
	cmd := &cobra.Command{
		Use:   "proxy --upstream URL --openapi FILE|URL",
		Short: "Put idem in front of an HTTP API described by an OpenAPI document",
		Long: "Serve every operation of an OpenAPI 3.0 or 3.1 document through idem's pipeline and forward it to the\n" +
			"upstream: idempotency keys, replays, 409 in flight, indeterminate answers, audit, the catalog, the\n" +
			"OpenAPI document of the proxy (x-idem-agent-retry, keys, problems), and MCP at /mcp. A contract comes from the\n" +
			"operation's x-idem-agent-retry extension, else from --contracts, else from the method (GET/HEAD:\n" +
			"fresh_read; any other: no_automatic_retry). See docs/proxy.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m.defaults(&o.serveOptions)
			if o.upstream == "" {
				o.upstream = m.Getenv("IDEM_UPSTREAM")
			}
			if o.upstream == "" {
				return usagef("give the API to proxy with --upstream URL (or IDEM_UPSTREAM)")
			}
			if o.openapi == "" {
				return usagef("give its OpenAPI document with --openapi FILE|URL (a path such as /openapi.json is read from the upstream)")
			}
			return m.serve(cmd.Context(), o.serveOptions, o.application)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.upstream, "upstream", "", "base URL of the API to proxy, e.g. http://127.0.0.1:9000 (env IDEM_UPSTREAM)")
	f.StringVar(&o.openapi, "openapi", "", "its OpenAPI 3.0 or 3.1 document (JSON or YAML): a file, a URL, or a path on the upstream such as /openapi.json")
	f.StringVar(&o.contracts, "contracts", "", "overlay (YAML or JSON) of retry contracts by operationId: kind, reconcile, rationale, sideEffect, timeoutMs, preview, approval")
	f.BoolVar(&o.validate, "validate", true, "validate inputs against the document's schemas before forwarding (false: forward as is)")
	f.Int64Var(&o.maxStored, "max-stored-response", proxy.DefaultMaxStoredResponse, "largest upstream answer body, in bytes; a larger one is an error the caller sees")
	f.StringVar(&o.upstreamAuth, "upstream-auth", "", "Authorization header value sent upstream on every call; the caller's own is never forwarded (e.g. \"Bearer s3cr3t\")")
	f.DurationVar(&o.reloadEvery, "reload-interval", 0, "re-read the OpenAPI document and the overlay this often (0: only on SIGHUP); a document that fails to load or register keeps the running declarations")
	return cmd
}

// application serves the upstream as a one-upstream config of idem
// gateway --config (an openapi upstream named "upstream", prefix: false;
// SPEC §17.1): one code path with the gateway's.
func (o proxyOptions) application(ctx context.Context, _ idem.Store, _ *secretbox.Box, logger *slog.Logger) (application, error) {
	base := strings.TrimRight(o.upstream, "/")
	upstream, err := url.Parse(base)
	if err != nil || (upstream.Scheme != "http" && upstream.Scheme != "https") || upstream.Host == "" {
		return application{}, usagef("--upstream %q is not an http(s) URL", o.upstream)
	}
	if o.maxStored <= 0 {
		return application{}, usagef("--max-stored-response must be positive, got %d", o.maxStored)
	}
	if o.reloadEvery < 0 {
		return application{}, usagef("--reload-interval must be 0 or more, got %s", o.reloadEvery)
	}
	cfg := &gatewayconfig.Config{Upstreams: []gatewayconfig.Upstream{{Name: "upstream", Anonymous: true, Kind: gatewayconfig.KindOpenAPI,
		OpenAPI: o.openapi, BaseURL: base, Validate: o.validate, MaxStoredResponse: o.maxStored, Contracts: o.contracts}}}
	if o.upstreamAuth != "" {
		cfg.Upstreams[0].Headers = map[string]string{"Authorization": o.upstreamAuth}
		cfg.AddSecret(o.upstreamAuth)
	}
	if err := cfg.Finish(); err != nil {
		return application{}, err
	}
	app, err := upstreams{cfg: cfg, reloadEvery: o.reloadEvery, reconnectMax: gateway.DefaultBackoffCap, command: "proxy"}.application(ctx, logger)
	if err != nil {
		return application{}, err
	}
	logger.Info("proxying", "upstream", upstream.String(), "operations", len(app.operations), "openapi", o.openapi)
	return app, nil
}
