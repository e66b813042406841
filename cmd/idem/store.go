package main

import (
	"context"
	"strings"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/sqlitestore"
)

// defaultStore is the store idem uses when neither --store nor IDEM_STORE
// names one.
const defaultStore = "sqlite:idem.db"

// openStore opens the store a URL names: sqlite:PATH, or a postgres:// or
// postgresql:// connection URL. Opening applies pending migrations.
func openStore(ctx context.Context, url string, cfg idem.StoreConfig) (idem.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(url, "sqlite:")
		if path == "" {
			return nil, usagef("--store sqlite:PATH needs a path, e.g. sqlite:idem.db")
		}
		return sqlitestore.Open(ctx, path, cfg)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return pgstore.Open(ctx, url, cfg)
	}
	return nil, usagef("--store %q: want sqlite:PATH or postgres://USER@HOST:PORT/DB", redact(url))
}

// redact hides a password in a connection URL.
func redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		return scheme + "://" + user + ":***@" + host
	}
	return url
}

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
