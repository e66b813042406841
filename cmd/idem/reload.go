package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idem-run/idem/server"
)

// reloadLoop declares an application's operations again on SIGHUP and
// every app.reloadEvery (idem proxy, SPEC §15), and when app.reloadNow
// fires (idem gateway, SPEC §17): a declaration that fails
// to load or to register leaves the running one in place and says why.
//
// The rules an application configures (configRules) are put in place
// with its operations.
func reloadLoop(ctx context.Context, srv *server.Server, app application, pol *policies, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if app.reloadEvery > 0 {
		t := time.NewTicker(app.reloadEvery)
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
		case why = <-app.reloadNow:
		}
		next, err := app.reload(ctx)
		if err == nil {
			err = srv.Reload(ctx, next.operations, next.openapi)
			if next.committed != nil {
				next.committed(err)
			}
		}
		if err != nil {
			logger.Error("reload failed: the running declarations stay", "trigger", why, "error", err)
			continue
		}
		if next.configRules {
			pol.put(next.rules, next.rulesSource)
		}
		logger.Info("reloaded", "trigger", why, "operations", len(srv.Runner().Descriptors()))
		if app.afterReload != nil {
			app.afterReload(why)
		}
	}
}
