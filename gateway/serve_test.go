package gateway_test

import (
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/gatewayconfig"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
)

// The set-up the gateway's tests share: an upstream dialled and its
// tools built, a Set declared, and the operations served as idem gateway
// serves them.

// dial is a session with the upstream of cfg, closed when the test ends.
func dial(t testing.TB, cfg gateway.UpstreamConfig) *gateway.Upstream {
	t.Helper()
	up, err := gateway.Dial(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	return up
}

// build lists up's tools and builds their operations with ov.
func build(t testing.TB, up *gateway.Upstream, ov proxy.Overlay) []idem.Operation {
	t.Helper()
	tools, err := up.Tools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	built, err := gateway.Build(tools, ov, up, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return built.Operations
}

// declared is the committed declaration of a Set (opts) of the upstreams
// ups, and the Set, closed when the test ends.
func declared(t *testing.T, opts gateway.SetOptions, ups ...gatewayconfig.Upstream) (*gateway.Set, *gateway.Declaration) {
	t.Helper()
	set := gateway.NewSet(opts)
	t.Cleanup(func() { set.Close() })
	d, err := set.Declare(t.Context(), config(t, ups...))
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	return set, d
}

// serveGateway serves ops (and fw's resources and prompts, when not nil)
// as idem gateway does, to the agent's token, on the SQLite store in the
// file db ("": one of the test's own): its URL, and the server.
func serveGateway(t testing.TB, db string, ops []idem.Operation, fw mcpserver.Forwarder) (string, *server.Server) {
	t.Helper()
	if db == "" {
		db = filepath.Join(t.TempDir(), "idem.db")
	}
	store, err := sqlitestore.Open(t.Context(), db, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(t.Context(), server.Config{Operations: ops, Store: store, NoDirectCLIOperations: true, MCPForward: fw,
		Auth: httpapi.NewTokens(map[string]idem.Principal{token: {Org: "o", ID: "agent", Kind: idem.KindAgent}})})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL, srv
}
