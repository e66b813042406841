package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/idem-run/idem/mcpserver"
)

// mcpOptions are the flags of idem mcp.
type mcpOptions struct {
	server  string
	token   string
	refresh time.Duration
}

func (m Main) mcpCommand() *cobra.Command {
	var o mcpOptions
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the operations as MCP tools over stdio, forwarding to an idem server",
		Long: "Run an MCP server on stdin and stdout for agents that only speak stdio. It reads the catalog of the\n" +
			"idem server at --server and offers the same tools as its /mcp endpoint; each call is forwarded to the\n" +
			"operation's HTTP route with --token, and the answer comes back as the tool result. The catalog is read\n" +
			"again every --refresh-interval: a tool added, changed or removed on the server is announced to the\n" +
			"client with notifications/tools/list_changed, and nothing is sent when nothing changed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.server, o.token = m.serverAndToken(o.server, o.token)
			return m.mcpServe(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "URL of the idem server (env IDEM_SERVER; default "+defaultServer+")")
	f.StringVar(&o.token, "token", "", "bearer token the calls are made with (env IDEM_TOKEN)")
	f.DurationVar(&o.refresh, "refresh-interval", 30*time.Second, "how often the server's catalog is read again for changed tools")
	return cmd
}

// mcpServe serves MCP on stdio until the client closes stdin (requests
// already read are answered first) or ctx ends.
func (m Main) mcpServe(ctx context.Context, o mcpOptions) error {
	u, err := url.Parse(o.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--server %q is not an http:// or https:// URL", o.server)
	}
	logger := slog.New(slog.NewJSONHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if o.refresh <= 0 {
		return usagef("--refresh-interval %s is not a positive duration", o.refresh)
	}
	backend := mcpserver.NewRemoteBackend(o.server, o.token, &http.Client{})
	published, err := mcpserver.PublishedOf(ctx, backend)
	if err != nil {
		return err
	}
	srv, err := mcpserver.New(ctx, backend, mcpserver.Options{Version: buildVersion(), Logger: logger})
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go refreshTools(ctx, srv, backend, published, o.refresh, logger)
	err = srv.Run(ctx, &mcpserver.StdioTransport{Reader: io.NopCloser(m.Stdin), Writer: mcpStdout{m.Stdout}, Logger: logger})
	if err == nil || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.EPIPE) {
		// The client closed its end first; the session's last answers
		// (its notification stream's end) had no reader left.
		return nil
	}
	return err
}

// refreshTools reads the catalog every interval until ctx ends and makes
// srv's tools its operations (mcpserver.Update, which announces a change
// with notifications/tools/list_changed: the SDK advertises listChanged).
// A failed read keeps the tools as they are; it is logged once until a
// read succeeds again.
func refreshTools(ctx context.Context, srv *mcp.Server, b mcpserver.Backend, published mcpserver.Published, interval time.Duration, logger *slog.Logger) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, err := mcpserver.Update(ctx, srv, b, published)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			logger.Warn("the server's catalog could not be read again; the tools stay as they were", "error", err.Error())
		case err == nil && failing:
			logger.Warn("the server's catalog is read again")
		}
		failing = err != nil
		published = now
	}
}

// mcpStdout leaves stdout open when the MCP connection closes.
type mcpStdout struct{ io.Writer }

func (mcpStdout) Close() error { return nil }
