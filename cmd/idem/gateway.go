package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/gatewayconfig"
	"github.com/idem-run/idem/policyfile"
	"github.com/idem-run/idem/secretbox"
)

// gatewayOptions are the flags of idem gateway (SPEC §17, §17.1) besides
// those it shares with idem serve.
type gatewayOptions struct {
	serveOptions
	config          string
	upstream        []string
	upstreamCommand []string
	upstreamHeaders []string
	upstreamEnv     []string
	contracts       string
	connectTimeout  time.Duration
	reloadEvery     time.Duration
	watchEvery      time.Duration
	reconnectMax    time.Duration
	maxAnswer       int64
	cfg             *gatewayconfig.Config // from --config, or from the one-upstream flags
	getenv          func(string) string
}

func (m Main) gatewayCommand() *cobra.Command {
	var o gatewayOptions
	cmd := &cobra.Command{
		Use:   "gateway --config FILE | --upstream URL | --upstream-command \"CMD ARGS\"",
		Short: "Put idem in front of MCP servers and HTTP APIs",
		Long: "Serve every tool of MCP servers (reached over streamable HTTP, or spawned and spoken to over stdio)\n" +
			"and every operation of HTTP APIs described by OpenAPI documents through idem's pipeline, at one /mcp\n" +
			"and at POST /tools/{name}: idempotency keys, replays of the upstream's stored tool result, 409 in flight,\n" +
			"indeterminate answers, approvals, audit, the catalog. --config FILE names the upstreams (SPEC §17.1;\n" +
			"a tool is served as <upstream>.<tool>); --upstream or --upstream-command fronts one MCP server, its tools\n" +
			"named as they are. A contract comes from the upstream's contracts overlay (keyed by tool name), else\n" +
			"from the tool's annotations (readOnlyHint: fresh_read; idempotentHint with a reconcile: convergent;\n" +
			"any other: no_automatic_retry). The config file reloads on SIGHUP and when it changes; an upstream's\n" +
			"tools/list_changed updates the tools served. A spawned upstream gets PATH, HOME, LANG, LC_*, TMPDIR,\n" +
			"USER, LOGNAME, SHELL and TERM of idem's environment, and what env (--upstream-env) names. See docs/gateway.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m.defaults(&o.serveOptions)
			if o.reloadEvery < 0 {
				return usagef("--reload-interval must be 0 or more, got %s", o.reloadEvery)
			}
			if o.reconnectMax < time.Second {
				return usagef("--reconnect-max-wait must be 1s or more, got %s", o.reconnectMax)
			}
			if o.connectTimeout < 0 {
				return usagef("--connect-timeout must be 0 or more, got %s", o.connectTimeout)
			}
			cfg, err := o.gatewayConfig(m.Getenv)
			if err != nil {
				return err
			}
			o.cfg, o.getenv = cfg, m.Getenv
			gatewayGC(m.Getenv)
			return m.serve(cmd.Context(), o.serveOptions, o.application)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "YAML file of the upstreams to front (SPEC §17.1, docs/gateway.md); reloaded on SIGHUP and when it changes")
	f.StringArrayVar(&o.upstream, "upstream", nil, "streamable HTTP endpoint of the one MCP server to front, e.g. http://127.0.0.1:3001/mcp (env IDEM_UPSTREAM)")
	f.StringArrayVar(&o.upstreamCommand, "upstream-command", nil, "command that runs the one MCP server to front over stdio, e.g. \"node server.js\" (split on spaces; quote with ' or \"); see --upstream-env")
	f.StringArrayVar(&o.upstreamHeaders, "upstream-header", nil, "NAME=VALUE header sent with every request to an HTTP upstream (its credentials: Authorization=Bearer …); repeatable")
	f.StringArrayVar(&o.upstreamEnv, "upstream-env", nil, "NAME=VALUE, or NAME to pass idem's own value, for the spawned upstream's environment (it gets only PATH, HOME, LANG, LC_*, TMPDIR, USER, LOGNAME, SHELL, TERM besides); repeatable")
	f.StringVar(&o.contracts, "contracts", "", "overlay (YAML or JSON) of retry contracts by tool name: kind, reconcile, rationale, sideEffect, timeoutMs, approval")
	f.DurationVar(&o.connectTimeout, "connect-timeout", 0, "bound on connecting to the upstream and its MCP handshake (0: 15s; timeouts.connect in --config)")
	f.DurationVar(&o.reloadEvery, "reload-interval", time.Minute, "list the upstreams' tools (and re-read the contracts and the config) this often besides on tools/list_changed and SIGHUP (0: never); a list that fails to load or register keeps the running declarations")
	f.Int64Var(&o.maxAnswer, "upstream-max-answer", gateway.DefaultMaxResultBytes, "bytes the gateway reads of one MCP upstream answer (a JSON body, an SSE event, a stdio line) before it stops: a tool result over it is EXECUTION_FAILED, the call having run")
	f.DurationVar(&o.reconnectMax, "reconnect-max-wait", gateway.DefaultBackoffCap, "longest wait between two attempts to reach an upstream that is down (the first after 1s, then twice as long each time)")
	f.DurationVar(&o.watchEvery, "config-check-interval", 2*time.Second, "how often --config's file is checked for a change, which reloads it (0: only on SIGHUP)")
	return cmd
}

// gatewayGCPercent is the garbage collector's target of idem gateway
// (GOGC) unless the environment sets GOGC: the MCP SDK allocates 32 KiB
// for each JSON value it decodes (go-sdk v1.8.0), about ten per forwarded
// tool call on the gateway's two ends, garbage at once, so at Go's default
// of 100 the collector runs often over a small live heap (a quarter of the
// gateway's CPU). 400 lets the heap grow to five times what is live
// between two collections. docs/PERFORMANCE.md, issue 34.
const gatewayGCPercent = 400

// gatewayGC sets gatewayGCPercent when GOGC is not set.
func gatewayGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gatewayGCPercent)
	}
}

// gatewayConfig is the config of --config, or the one-upstream config the
// flags say (prefix: false, SPEC §17.1), checked before anything is
// opened.
func (o gatewayOptions) gatewayConfig(getenv func(string) string) (*gatewayconfig.Config, error) {
	if o.config != "" {
		for name, given := range map[string]bool{"--upstream": len(o.upstream) > 0, "--upstream-command": len(o.upstreamCommand) > 0,
			"--upstream-header": len(o.upstreamHeaders) > 0, "--upstream-env": len(o.upstreamEnv) > 0, "--contracts": o.contracts != "", "--connect-timeout": o.connectTimeout != 0} {
			if given {
				return nil, usagef("%s is for one upstream without --config; in the config file, give it to its upstream (docs/gateway.md)", name)
			}
		}
		cfg, err := gatewayconfig.Load(o.config, getenv)
		if err != nil {
			return nil, err
		}
		if _, err := configRules(cfg, o.config, o.policies); err != nil {
			return nil, err
		}
		return cfg, nil
	}
	if len(o.upstream) == 0 && len(o.upstreamCommand) == 0 {
		if v := getenv("IDEM_UPSTREAM"); v != "" {
			o.upstream = []string{v}
		}
	}
	for name, n := range map[string]int{"--upstream": len(o.upstream), "--upstream-command": len(o.upstreamCommand)} {
		if n > 1 {
			return nil, usagef("%s is given %d times: one gateway without --config fronts one MCP server; front several with --config FILE (docs/gateway.md)", name, n)
		}
	}
	if (len(o.upstream) == 0) == (len(o.upstreamCommand) == 0) {
		return nil, usagef("give the MCP server to front with --upstream URL (streamable HTTP) or --upstream-command \"CMD ARGS\" (spawned, stdio), one of them, or several upstreams with --config FILE")
	}
	u := gatewayconfig.Upstream{Name: "upstream", Anonymous: true, Kind: gatewayconfig.KindMCP, Contracts: o.contracts,
		Timeouts: gatewayconfig.Timeouts{Connect: o.connectTimeout}}
	cfg := &gatewayconfig.Config{}
	if len(o.upstream) == 1 {
		raw := o.upstream[0]
		parsed, err := url.Parse(raw)
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			return nil, usagef("--upstream %q is not an http(s) URL", raw)
		}
		if len(o.upstreamEnv) > 0 {
			return nil, usagef("--upstream-env is for a spawned upstream (--upstream-command); an HTTP one takes its credentials in --upstream-header")
		}
		u.URL, u.Headers = raw, map[string]string{}
		for _, h := range o.upstreamHeaders {
			name, value, ok := strings.Cut(h, "=")
			if !ok || strings.TrimSpace(name) == "" {
				return nil, usagef("--upstream-header %q: want NAME=VALUE", h)
			}
			u.Headers[strings.TrimSpace(name)] = value
			cfg.AddSecret(value)
		}
	} else {
		if len(o.upstreamHeaders) > 0 {
			return nil, usagef("--upstream-header is for an HTTP upstream; a spawned one takes its credentials in --upstream-env")
		}
		args, err := splitCommand(o.upstreamCommand[0])
		if err != nil {
			return nil, usagef("--upstream-command: %v", err)
		}
		u.Command, u.Env = args, map[string]string{}
		for _, e := range o.upstreamEnv {
			name, value, ok := strings.Cut(e, "=")
			if err := gatewayconfig.CheckEnvName(name); err != nil {
				return nil, usagef("--upstream-env %q: %v", name, err)
			}
			if !ok {
				if value = getenv(name); value == "" {
					return nil, usagef("--upstream-env %s: idem's environment has no %s to pass (give NAME=VALUE)", name, name)
				}
				cfg.AddSecret(value) // passed from the environment, as a ${VAR} reference is
			}
			u.Env[name] = value
		}
	}
	cfg.Upstreams = []gatewayconfig.Upstream{u} // Prefix false: names and routes as before
	if err := cfg.Finish(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// configRules reads the policies: and limits: sections of the config read
// from file (SPEC §8.1, §17.1). With --policies (policiesFlag) the config
// must have none: the rules have one source.
func configRules(cfg *gatewayconfig.Config, file, policiesFlag string) (policyfile.File, error) {
	f, err := policyfile.Decode(cfg.Policies, cfg.Limits)
	if err != nil {
		return policyfile.File{}, fmt.Errorf("gateway config %s: %w", file, err)
	}
	if !f.Empty() && policiesFlag != "" {
		return policyfile.File{}, usagef("--policies %s and the policies:/limits: of --config %s are two sources of rules: give the rules in one of them (docs/policies.md)", policiesFlag, file)
	}
	return f, nil
}

// application starts the upstreams and declares their operations.
func (o gatewayOptions) application(ctx context.Context, _ idem.Store, _ *secretbox.Box, logger *slog.Logger) (application, error) {
	return upstreams{cfg: o.cfg, file: o.config, getenv: o.getenv, reloadEvery: o.reloadEvery, watchEvery: o.watchEvery,
		reconnectMax: o.reconnectMax, maxAnswer: o.maxAnswer, command: "gateway", policiesFlag: o.policies}.application(ctx, logger)
}

// upstreams is what idem gateway and idem proxy serve: the upstreams of a
// config (SPEC §17.1), run by a gateway.Set.
type upstreams struct {
	cfg *gatewayconfig.Config
	// file is the config file to read again on a reload ("": cfg came
	// from flags and stays).
	file   string
	getenv func(string) string
	// reloadEvery: declare again this often (0: never); watchEvery: check
	// file for a change this often (0: never).
	reloadEvery, watchEvery time.Duration
	reconnectMax            time.Duration
	// maxAnswer bounds one MCP upstream answer (0: gateway's default).
	maxAnswer int64
	// command names the log lines and errors: "gateway" or "proxy".
	command string
	// policiesFlag is --policies FILE: a config file (file) with rules of
	// its own is then refused.
	policiesFlag string
}

func (u upstreams) application(ctx context.Context, logger *slog.Logger) (application, error) {
	secrets := &redactor{}
	secrets.add(u.cfg)
	logger = slog.New(redacting{next: logger.Handler(), r: secrets})
	set := gateway.NewSet(gateway.SetOptions{Logger: logger, Version: buildVersion(), Environ: os.Environ(), Backoff: u.reconnectMax,
		MaxResultBytes: u.maxAnswer})
	var warned []string
	running := u.cfg
	declare := func(ctx context.Context, cfg *gatewayconfig.Config) (*gateway.Declaration, error) {
		decl, err := set.Declare(ctx, cfg)
		if err != nil {
			return nil, errors.New(secrets.redact(fmt.Sprintf("idem %s: %v", u.command, err)))
		}
		if !slices.Equal(decl.Warnings, warned) {
			for _, w := range decl.Warnings {
				logger.Warn(u.command, "warning", w)
			}
			warned = decl.Warnings
		}
		return decl, nil
	}
	logStates := func() {
		if u.command == "proxy" {
			return // idem proxy says "proxying" instead, as it always did
		}
		for _, st := range set.States() {
			logger.Info(u.command, "upstream", st.Name, "state", st.State, "operations", st.Operations)
		}
	}
	// The config file's rules (SPEC §8.1) compile against the operations
	// its upstreams serve, operation.upstream naming each one's upstream;
	// a config whose rules do not compile is refused whole.
	configured := u.file != "" && u.policiesFlag == ""
	var upstreamOf atomic.Pointer[map[string]string]
	upstream := func(op string) string {
		if m := upstreamOf.Load(); m != nil {
			return (*m)[op]
		}
		return ""
	}
	rules := func(cfg *gatewayconfig.Config, decl *gateway.Declaration) (*policyfile.Set, error) {
		f, err := configRules(cfg, u.file, u.policiesFlag)
		if err != nil || !configured || f.Empty() {
			return nil, err
		}
		reg, err := idem.NewRegistry(decl.Operations...)
		if err != nil {
			return nil, err
		}
		names := upstreamNames(cfg, decl)
		return compileRules(f, "gateway config "+u.file, reg.Descriptors(), func(op string) string { return names[op] })
	}
	first, err := declare(ctx, running)
	if err != nil {
		set.Close()
		return application{}, err
	}
	firstRules, err := rules(running, first)
	if err != nil {
		first.Abort()
		set.Close()
		return application{}, err
	}
	first.Commit()
	names := upstreamNames(running, first)
	upstreamOf.Store(&names)
	logStates()
	app := application{operations: first.Operations, openapi: first.OpenAPI, proxied: true, upstream: upstream,
		rules: firstRules, configRules: configured, rulesSource: "gateway config " + u.file}
	app.reload = func(ctx context.Context) (application, error) {
		next := running
		if u.file != "" {
			cfg, err := gatewayconfig.Load(u.file, u.getenv)
			if err != nil {
				return application{}, fmt.Errorf("the config file is refused and the running config stays: %s", secrets.redact(err.Error()))
			}
			secrets.add(cfg)
			next = cfg
		}
		decl, err := declare(ctx, next)
		if err != nil {
			return application{}, err
		}
		nextRules, err := rules(next, decl)
		if err != nil {
			decl.Abort()
			return application{}, fmt.Errorf("the config file is refused and the running config and rules stay: %s", secrets.redact(err.Error()))
		}
		return application{operations: decl.Operations, openapi: decl.OpenAPI, proxied: true,
			rules: nextRules, configRules: configured, rulesSource: app.rulesSource, committed: func(err error) {
				if err != nil {
					decl.Abort()
					return
				}
				decl.Commit()
				running = next
				names := upstreamNames(next, decl)
				upstreamOf.Store(&names)
				logStates()
			}}, nil
	}
	app.reloadEvery = u.reloadEvery
	now := make(chan string, 1)
	ask := func(why string) {
		select {
		case now <- why:
		default: // a reload is already due
		}
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-set.Changed():
				ask("an upstream's tools changed, or an upstream answers again")
			}
		}
	}()
	if u.file != "" && u.watchEvery > 0 {
		go watchFile(ctx, u.file, u.watchEvery, func() { ask("the config file changed") })
	}
	app.reloadNow = now
	app.close = set.Close
	app.mcpForward = set.Forwarder()
	app.readiness = func(context.Context) map[string]any { return map[string]any{"upstreams": set.States()} }
	return app, nil
}

// upstreamNames maps each operation of decl to operation.upstream of the
// policies (SPEC §8.1): its upstream's configured name; for the upstream
// of the one-upstream flags (idem gateway --upstream…, idem proxy), its
// URL (an OpenAPI upstream's base URL), or "" when it is spawned.
func upstreamNames(cfg *gatewayconfig.Config, decl *gateway.Declaration) map[string]string {
	anonymous := map[string]string{}
	for _, u := range cfg.Upstreams {
		if u.Anonymous {
			anonymous[u.Name] = cmp.Or(u.URL, u.BaseURL)
		}
	}
	out := make(map[string]string, len(decl.Upstreams))
	for op, name := range decl.Upstreams {
		if url, ok := anonymous[name]; ok {
			name = url
		}
		out[op] = name
	}
	return out
}

// watchFile calls changed when the file's content differs from what it
// was at the last check (every interval): an editor's rename over the
// file counts, a touch does not.
func watchFile(ctx context.Context, file string, interval time.Duration, changed func()) {
	sum := func() (out [32]byte) {
		f, err := os.Open(file)
		if err != nil {
			return out
		}
		defer f.Close()
		h := sha256.New()
		io.Copy(h, io.LimitReader(f, gatewayconfig.MaxFileBytes+1))
		copy(out[:], h.Sum(nil))
		return out
	}
	last := sum()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if now := sum(); now != last {
				last = now
				changed()
			}
		}
	}
}

// redactor takes every credential any config of this run resolved out of
// a text.
type redactor struct {
	mu  sync.Mutex
	all gatewayconfig.Config
}

func (r *redactor) add(c *gatewayconfig.Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range c.Secrets() {
		r.all.AddSecret(s)
	}
}

func (r *redactor) redact(s string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all.Redact(s)
}

// redacting is a slog.Handler that takes the credentials out of every
// message and string value (errors included) before next sees them.
type redacting struct {
	next slog.Handler
	r    *redactor
}

func (h redacting) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h redacting) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redacting) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.redact(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = h.attr(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.r.redact(err.Error()))
		}
		return slog.String(a.Key, h.r.redact(fmt.Sprint(v.Any())))
	}
	return a
}

func (h redacting) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.attr(a)
	}
	return redacting{next: h.next.WithAttrs(out), r: h.r}
}

func (h redacting) WithGroup(name string) slog.Handler {
	return redacting{next: h.next.WithGroup(name), r: h.r}
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
