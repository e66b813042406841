package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// NewHTTPServer is an http.Server for h with idem's protection against
// slow clients: headers within 10 s and the whole request within 1 min;
// an idle keep-alive connection closed after 2 min; headers over 64 KiB
// answered 431. It has no WriteTimeout: an answer may legitimately take a
// Prefer: wait (up to 30 s) plus an execution's bound, and MCP event
// streams are long-lived; the read deadline is lifted once the request is
// read, so it never cuts a running execution.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Serve serves Handler on ln and runs the background work until ctx
// ends, then shuts down gracefully: no new requests; running executions
// get ShutdownBound to finish; MCP streams end; the sweeper and the feed
// stop; queued audit events are written (10 s at most). Executions still
// running after the bound become indeterminate by lease. It returns nil
// after a shutdown that ctx asked for, or the listener's error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := NewHTTPServer(s.handler, s.log)
	srv.RegisterOnShutdown(s.drainMCP)
	if err := s.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var serveErr error
	select {
	case err := <-served:
		serveErr = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		s.log.Info("shutting down: no new requests; running executions finish within their bound")
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ShutdownBound())
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr == nil {
		<-served // http.ErrServerClosed
	}
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelStop()
	if serr := s.Stop(stopCtx); serr != nil {
		s.log.Warn("replay audit events still queued at exit", "error", serr)
	}
	switch {
	case serveErr != nil:
		return serveErr
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("shutdown bound passed with executions still running; their records become indeterminate by lease")
	case err != nil:
		return fmt.Errorf("shutdown: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// ListenAndServe listens on addr (host:port) and calls Serve. listening,
// when set, is told the address once the listener is open (":0" picks a
// port).
func (s *Server) ListenAndServe(ctx context.Context, addr string, listening func(addr string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	if listening != nil {
		listening(ln.Addr().String())
	}
	return s.Serve(ctx, ln)
}
