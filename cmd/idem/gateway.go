package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/secretbox"
)

// gatewayOptions are the flags of idem gateway (SPEC §17) besides those it
// shares with idem serve.
type gatewayOptions struct {
	serveOptions
	upstream        string
	upstreamCommand string
	upstreamHeaders []string
	contracts       string
	reloadEvery     time.Duration
	cfg             gateway.UpstreamConfig // from the flags above
}

func (m Main) gatewayCommand() *cobra.Command {
	var o gatewayOptions
	cmd := &cobra.Command{
		Use:   "gateway --upstream URL | --upstream-command \"CMD ARGS\"",
		Short: "Put idem in front of an MCP server",
		Long: "Serve every tool of an MCP server (reached over streamable HTTP, or spawned and spoken to over\n" +
			"stdio) through idem's pipeline: one operation per tool, named as the tool, served at /mcp and at\n" +
			"POST /tools/{name}; idempotency keys, replays of the upstream's stored tool result, 409 in flight,\n" +
			"indeterminate answers, approvals, audit, the catalog. A contract comes from --contracts (keyed by\n" +
			"tool name), else from the tool's annotations (readOnlyHint: fresh_read; idempotentHint with a\n" +
			"reconcile: convergent; any other: no_automatic_retry). The upstream's tools/list_changed updates\n" +
			"the tools served. See docs/gateway.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m.defaults(&o.serveOptions)
			if o.upstream == "" && o.upstreamCommand == "" {
				o.upstream = m.Getenv("IDEM_UPSTREAM")
			}
			if (o.upstream == "") == (o.upstreamCommand == "") {
				return usagef("give the MCP server to front with --upstream URL (streamable HTTP) or --upstream-command \"CMD ARGS\" (spawned, stdio), one of them")
			}
			if o.reloadEvery < 0 {
				return usagef("--reload-interval must be 0 or more, got %s", o.reloadEvery)
			}
			cfg, err := o.upstreamConfig()
			if err != nil {
				return err
			}
			o.cfg = cfg
			return m.serve(cmd.Context(), o.serveOptions, o.application)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.upstream, "upstream", "", "streamable HTTP endpoint of the MCP server, e.g. http://127.0.0.1:3001/mcp (env IDEM_UPSTREAM)")
	f.StringVar(&o.upstreamCommand, "upstream-command", "", "command that runs the MCP server over stdio, e.g. \"node server.js\" (split on spaces; quote with ' or \"); it inherits idem's environment")
	f.StringArrayVar(&o.upstreamHeaders, "upstream-header", nil, "NAME=VALUE header sent with every request to an HTTP upstream (its credentials: Authorization=Bearer …); repeatable")
	f.StringVar(&o.contracts, "contracts", "", "overlay (YAML or JSON) of retry contracts by tool name: kind, reconcile, rationale, sideEffect, timeoutMs, approval")
	f.DurationVar(&o.reloadEvery, "reload-interval", time.Minute, "list the upstream's tools (and re-read --contracts) this often besides on tools/list_changed and SIGHUP (0: never); a list that fails to load or register keeps the running declarations")
	return cmd
}

// upstreamConfig checks the upstream's flags (before anything is opened).
func (o gatewayOptions) upstreamConfig() (gateway.UpstreamConfig, error) {
	var cfg gateway.UpstreamConfig
	if o.upstream != "" {
		u, err := url.Parse(o.upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, usagef("--upstream %q is not an http(s) URL", o.upstream)
		}
		cfg.URL = o.upstream
		cfg.Header = http.Header{}
		for _, h := range o.upstreamHeaders {
			name, value, ok := strings.Cut(h, "=")
			if !ok || strings.TrimSpace(name) == "" {
				return cfg, usagef("--upstream-header %q: want NAME=VALUE", h)
			}
			cfg.Header.Add(strings.TrimSpace(name), value)
		}
		return cfg, nil
	}
	if len(o.upstreamHeaders) > 0 {
		return cfg, usagef("--upstream-header is for an HTTP upstream; a spawned one takes its credentials from the environment")
	}
	args, err := splitCommand(o.upstreamCommand)
	if err != nil {
		return cfg, usagef("--upstream-command: %v", err)
	}
	cfg.Command = args
	return cfg, nil
}

// application connects to the upstream and declares its tools.
func (o gatewayOptions) application(ctx context.Context, _ idem.Store, _ *secretbox.Box, logger *slog.Logger) (application, error) {
	cfg := o.cfg
	cfg.Logger, cfg.Version = logger, buildVersion()
	changed := make(chan struct{}, 1)
	cfg.OnToolsChanged = func() {
		select {
		case changed <- struct{}{}:
		default: // one re-list is already due
		}
	}
	up, err := gateway.Dial(ctx, cfg)
	if err != nil {
		return application{}, err
	}
	var warned []string
	app, err := o.declare(ctx, up, logger, &warned)
	if err != nil {
		up.Close()
		return application{}, err
	}
	app.reload = func(ctx context.Context) (application, error) { return o.declare(ctx, up, logger, &warned) }
	app.reloadEvery = o.reloadEvery
	app.reloadNow = changed
	app.close = func() { up.Close() }
	app.mcpForward = up.Forwarder("") // the one-upstream form: names kept
	return app, nil
}

// declare lists the upstream's tools, reads the overlay and declares the
// operations (at start, and again on every reload).
func (o gatewayOptions) declare(ctx context.Context, up *gateway.Upstream, logger *slog.Logger, warned *[]string) (application, error) {
	overlay, err := proxy.LoadOverlay(o.contracts)
	if err != nil {
		return application{}, err
	}
	tools, err := up.Tools(ctx)
	if err != nil {
		return application{}, err
	}
	built, err := gateway.Build(tools, overlay, up)
	if err != nil {
		return application{}, fmt.Errorf("idem gateway: %w", err)
	}
	if !slices.Equal(built.Warnings, *warned) {
		for _, w := range built.Warnings {
			logger.Warn("gateway", "warning", w)
		}
		*warned = built.Warnings
	}
	doc, err := gateway.Document(built.Operations, httpapi.OpenAPIInfo{Title: "idem gateway", Version: buildVersion()})
	if err != nil {
		return application{}, fmt.Errorf("idem gateway: %w", err)
	}
	logger.Info("gateway", "upstream", up.Describe(), "tools", len(built.Operations))
	return application{operations: built.Operations, openapi: doc, proxied: true}, nil
}

// splitCommand splits a command line on spaces, keeping what '…' or "…"
// quote together (no escapes, no variables: it runs no shell).
func splitCommand(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		out = append(out, cur.String())
	}
	if len(out) == 0 {
		return nil, errors.New("empty command")
	}
	return out, nil
}
