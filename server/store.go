package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/sqlitestore"
)

// OpenStore opens the store a URL names: sqlite:PATH, or a postgres:// or
// postgresql:// connection URL. Opening applies pending migrations. On
// PostgreSQL it logs the store's durability (replication settings) on
// log, warning when a commit can be lost with one machine.
func OpenStore(ctx context.Context, url string, cfg idem.StoreConfig, log *slog.Logger) (idem.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(url, "sqlite:")
		if path == "" {
			return nil, fmt.Errorf("store URL %q: sqlite:PATH needs a path, e.g. sqlite:idem.db", url)
		}
		return sqlitestore.Open(ctx, path, cfg)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		s, err := pgstore.Open(ctx, url, cfg)
		if err != nil {
			return nil, err
		}
		if log != nil {
			logDurability(ctx, s, log)
		}
		return s, nil
	}
	return nil, fmt.Errorf("store URL %q: want sqlite:PATH or postgres://USER@HOST:PORT/DB", Redact(url))
}

func logDurability(ctx context.Context, s *pgstore.Store, log *slog.Logger) {
	d, err := s.Durability(ctx)
	if err != nil {
		log.Warn("store durability: cannot read the replication settings", "error", err)
		return
	}
	log.Info("store durability", "mode", d.Mode(), "synchronousCommit", d.SynchronousCommit,
		"synchronousStandbyNames", d.SynchronousStandbyNames, "standbys", d.Standbys, "synchronousStandbys", d.SynchronousStandbys)
	if w := d.Warning(); w != "" {
		log.Warn("store durability", "mode", d.Mode(), "warning", w)
	}
}

// Redact hides a password in a connection URL, for logs and errors.
func Redact(url string) string {
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
