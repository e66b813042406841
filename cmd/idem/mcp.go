package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/idem-run/idem/mcpserver"
)

// mcpOptions are the flags of idem mcp.
type mcpOptions struct {
	server string
	token  string
}

func (m Main) mcpCommand() *cobra.Command {
	var o mcpOptions
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the operations as MCP tools over stdio, forwarding to an idem server",
		Long: "Run an MCP server on stdin and stdout for agents that only speak stdio. It reads the catalog of the\n" +
			"idem server at --server and offers the same tools as its /mcp endpoint; each call is forwarded to the\n" +
			"operation's HTTP route with --token, and the answer comes back as the tool result.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.server, o.token = m.serverAndToken(o.server, o.token)
			return m.mcpServe(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "URL of the idem server (env IDEM_SERVER; default "+defaultServer+")")
	f.StringVar(&o.token, "token", "", "bearer token the calls are made with (env IDEM_TOKEN)")
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
	backend := mcpserver.NewRemoteBackend(o.server, o.token, &http.Client{})
	srv, err := mcpserver.New(ctx, backend, mcpserver.Options{Version: buildVersion(), Logger: logger})
	if err != nil {
		return err
	}
	err = srv.Run(ctx, &mcpserver.StdioTransport{Reader: io.NopCloser(m.Stdin), Writer: mcpStdout{m.Stdout}, Logger: logger})
	if err == nil || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}

// mcpStdout leaves stdout open when the MCP connection closes.
type mcpStdout struct{ io.Writer }

func (mcpStdout) Close() error { return nil }
