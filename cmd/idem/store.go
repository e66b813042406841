package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/server"
)

// defaultStore is the store idem uses when neither --store nor IDEM_STORE
// names one.
const defaultStore = "sqlite:idem.db"

// defaultStoreTimeout is --store-connect-timeout's default.
const defaultStoreTimeout = 10 * time.Second

const storeTimeoutHelp = "how long a new connection to a PostgreSQL store may take, from the dial to the server's first answer (0: no bound; a connect_timeout in the URL wins)"

// openStore opens the store a URL names (server.OpenStore); a URL of
// neither form is a usage error.
func openStore(ctx context.Context, url string, cfg idem.StoreConfig, log *slog.Logger) (idem.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		return nil, usagef("--store %q: a SQLite store is sqlite:PATH, without slashes: --store sqlite:%s", url, strings.TrimPrefix(url, "sqlite://"))
	case url == "sqlite:":
		return nil, usagef("--store sqlite:PATH needs a path, e.g. sqlite:idem.db")
	case strings.HasPrefix(url, "sqlite:"), strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return server.OpenStore(ctx, url, cfg, log)
	}
	return nil, usagef("--store %q: want sqlite:PATH or postgres://USER@HOST:PORT/DB", redact(url))
}

// redact hides a password in a connection URL.
func redact(url string) string { return server.Redact(url) }

// storeFlagValue returns the store URL from the flag, else IDEM_STORE, else
// the default.
func (m Main) storeFlagValue(flag string) string {
	if flag != "" {
		return flag
	}
	if env := m.Getenv("IDEM_STORE"); env != "" {
		return env
	}
	return defaultStore
}
