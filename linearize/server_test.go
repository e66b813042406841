package linearize

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

// cluster is the servers a history runs against, on one database.
type cluster struct {
	urls []string
	// transactional tells whether the catalog's operation op is
	// transactional (SPEC §6.7).
	transactional func(op string) bool
	// lin is the table of lin.put's committed effects.
	lin *linTable
	// upstream is the stand-in API behind linRaw (proxy_test.go), one for
	// all the servers, as the API idem proxy fronts is.
	upstream *upstream
}

// startServer starts the demo application, with lin.put and lin.show
// (linop_test.go) on lin and the raw operations linRaw and linRawShow
// (proxy_test.go) on up, on storeURL (sqlite:PATH or a PostgreSQL URL)
// behind a real HTTP listener, with its own store (its own pool) wrapped
// by wrap when set, and returns the server's URL and its registry. The
// server and store close when the test ends; Close waits for running
// requests.
func startServer(t *testing.T, storeURL string, lin *linTable, up *upstream, wrap func(idem.Store) idem.Store) (string, *idem.Registry) {
	t.Helper()
	ctx := context.Background()
	var (
		store idem.Store
		err   error
	)
	if path, ok := strings.CutPrefix(storeURL, "sqlite:"); ok {
		store, err = sqlitestore.Open(ctx, path, idem.StoreConfig{})
	} else {
		store, err = pgstore.Open(ctx, storeURL, idem.StoreConfig{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if wrap != nil {
		store = wrap(store)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	app, err := demo.Open(ctx, storeURL, demo.Config{Sealer: box})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	ops := append(app.Operations(), linOperations(lin)...)
	reg, err := idem.NewRegistry(append(ops, rawOperations(t, up)...)...)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Sealer: box, Logger: quiet, Policies: app.Policies()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(httpapi.NewHandler(httpapi.Config{
		Runner: runner, Store: store, Auth: httpapi.NewTokens(demo.Tokens()), Logger: quiet, Version: "linearize", Routes: app.Routes(),
	}))
	// Registered last, so it runs first: requests finish before the
	// application and the store close.
	t.Cleanup(ts.Close)
	return ts.URL, reg
}

// startCluster starts n servers on storeURL.
func startCluster(t *testing.T, storeURL string, n int, wrap func(idem.Store) idem.Store) *cluster {
	c := &cluster{lin: openLinTable(t, storeURL), upstream: newUpstream(t)}
	var reg *idem.Registry
	for range n {
		var url string
		url, reg = startServer(t, storeURL, c.lin, c.upstream, wrap)
		c.urls = append(c.urls, url)
	}
	c.transactional = func(op string) bool {
		d, ok := reg.Describe(op)
		if !ok {
			t.Fatalf("no operation %s in the catalog", op)
		}
		return d.Retry.Transactional
	}
	return c
}

// sqliteServers is one server on a fresh SQLite file.
func sqliteServers(t *testing.T, wrap func(idem.Store) idem.Store) *cluster {
	return startCluster(t, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), 1, wrap)
}

// postgresServers is two servers, each with its own runner and pool, on
// one fresh PostgreSQL database.
func postgresServers(t *testing.T, wrap func(idem.Store) idem.Store) *cluster {
	return startCluster(t, pgtest.NewDatabase(t), 2, wrap)
}
