package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/sqlitestore"
)

// OpenStore opens the store a URL names: sqlite:PATH, or a postgres:// or
// postgresql:// connection URL. Opening applies pending migrations. On
// log it says what it opens (the file; the host, port, database and user,
// never a password) and which migrations it applied, and on PostgreSQL the
// store's durability (replication settings), warning when a commit can be
// lost with one machine.
func OpenStore(ctx context.Context, url string, cfg idem.StoreConfig, log *slog.Logger) (idem.Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		return nil, fmt.Errorf("store URL %q: a SQLite store is sqlite:PATH, without slashes: sqlite:%s", url, strings.TrimPrefix(url, "sqlite://"))
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(url, "sqlite:")
		if path == "" {
			return nil, fmt.Errorf("store URL %q: sqlite:PATH needs a path, e.g. sqlite:idem.db", url)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			abs = path
		}
		log.Info("store: opening SQLite", "path", abs)
		s, err := sqlitestore.Open(ctx, path, cfg)
		if err != nil {
			return nil, err
		}
		logMigrated(log, s.Migrated())
		return s, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		if c, err := pgconn.ParseConfig(url); err == nil {
			timeout := c.ConnectTimeout
			if timeout == 0 {
				timeout = cfg.ConnectTimeout
			}
			log.Info("store: connecting to PostgreSQL", "host", c.Host, "port", c.Port, "database", c.Database, "user", c.User, "connectTimeout", timeout.String())
		}
		s, err := pgstore.Open(ctx, url, cfg)
		if err != nil {
			return nil, err
		}
		logMigrated(log, s.Migrated())
		logDurability(ctx, s, log)
		return s, nil
	}
	return nil, fmt.Errorf("store URL %q: want sqlite:PATH or postgres://USER@HOST:PORT/DB", Redact(url))
}

// logMigrated says which migrations opening the store applied.
func logMigrated(log *slog.Logger, applied []string) {
	if len(applied) == 0 {
		log.Info("store: schema up to date")
		return
	}
	log.Info("store: applied migrations", "migrations", applied)
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
