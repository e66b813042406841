package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
)

// swappable is an http.Handler that a reload replaces at once: a request
// is served by the handler it found, so the catalog, the OpenAPI document
// and the routes change together.
type swappable struct{ h atomic.Pointer[http.Handler] }

func (s *swappable) Store(h http.Handler) { s.h.Store(&h) }

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }

// reloader declares an application's operations again on SIGHUP and
// every reloadEvery (idem proxy, SPEC §15): a declaration that fails to
// load or to register leaves the running one in place and says why.
type reloader struct {
	app        application
	runner     *idem.Runner
	httpConfig httpapi.Config
	root       *swappable
	logger     *slog.Logger
	// check applies idem serve's start-up rules (retention over leases).
	check func(*idem.Registry) error
	// mcp updates the MCP tools to the runner's operations.
	mcp func(context.Context) error
}

func (rl reloader) run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if rl.app.reloadEvery > 0 {
		t := time.NewTicker(rl.app.reloadEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		var why string
		select {
		case <-ctx.Done():
			return
		case <-hup:
			why = "SIGHUP"
		case <-tick:
			why = "interval"
		}
		if err := rl.reload(ctx); err != nil {
			rl.logger.Error("reload failed: the running declarations stay", "trigger", why, "error", err)
			continue
		}
		rl.logger.Info("reloaded", "trigger", why, "operations", len(rl.runner.Descriptors()))
	}
}

// reload runs one reload: declare, register and check, then swap the
// runner's operations, the HTTP routes and documents, and the MCP tools.
func (rl reloader) reload(ctx context.Context) error {
	app, err := rl.app.reload(ctx)
	if err != nil {
		return err
	}
	reg, err := idem.NewRegistry(app.operations...)
	if err != nil {
		return err
	}
	if err := rl.check(reg); err != nil {
		return err
	}
	if err := httpapi.CheckRoutes(reg.Descriptors(), binaryRoutes...); err != nil {
		return err
	}
	if err := rl.runner.Reload(reg); err != nil {
		return err
	}
	cfg := rl.httpConfig
	cfg.OpenAPI = app.openapi
	rl.root.Store(httpapi.NewHandler(cfg))
	return rl.mcp(ctx)
}
