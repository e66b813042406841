package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
	"github.com/idem-run/idem/gatewayconfig"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

// Issue 34 (gateway.md "Not yet" 2): a config upstream's timeouts.call is
// its operations' timeout, above the 30 s default too; an overlay entry's
// timeoutMs still wins for its tool.
func TestSetCallTimeoutIsTheOperationsTimeout(t *testing.T) {
	a := newUpstream(t)
	contracts := filepath.Join(t.TempDir(), "contracts.yaml")
	if err := os.WriteFile(contracts, []byte("add: {kind: same_key_replay, reconcile: total, rationale: Replays by key., timeoutMs: 1500}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := gateway.NewSet(gateway.SetOptions{})
	defer set.Close()
	d, err := set.Declare(t.Context(), config(t, gatewayconfig.Upstream{Name: "a", Kind: gatewayconfig.KindMCP, URL: a.url, Prefix: true,
		Contracts: contracts, Timeouts: gatewayconfig.Timeouts{Call: 2 * time.Minute}}))
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	if w := strings.Join(d.Warnings, "\n"); !strings.Contains(w, `a.fail, a.slow; declare one in the contracts: file of upstream "a"`) {
		t.Errorf("warnings: %s", w)
	}
	reg, err := idem.NewRegistry(d.Operations...)
	if err != nil {
		t.Fatal(err)
	}
	// The catalog's timeoutMs is the descriptor's Timeout.
	want := map[string]time.Duration{"a.add": 1500 * time.Millisecond, "a.slow": 2 * time.Minute, "a.total": 2 * time.Minute}
	for _, desc := range reg.Descriptors() {
		if w, ok := want[desc.Name]; ok && desc.Timeout != w {
			t.Errorf("%s: timeout %s, want %s", desc.Name, desc.Timeout, w)
		}
	}
}

// Issue 34: a call is bounded by its upstream's timeouts.call as the
// operation's own timeout (TIMEOUT naming it), not cut inside a longer
// one; an overlay entry's timeoutMs, longer, wins for its tool (no
// second, shorter bound inside). The slow tool holds until cancelled, so
// the bound is what ends it.
func TestSetCallTimeoutBoundsTheCall(t *testing.T) {
	a := newUpstream(t)
	contracts := filepath.Join(t.TempDir(), "contracts.yaml")
	if err := os.WriteFile(contracts, []byte("slow: {kind: no_automatic_retry, rationale: Holds., timeoutMs: 900}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := gateway.NewSet(gateway.SetOptions{})
	defer set.Close()
	d, err := set.Declare(t.Context(), config(t,
		gatewayconfig.Upstream{Name: "a", Kind: gatewayconfig.KindMCP, URL: a.url, Prefix: true,
			Timeouts: gatewayconfig.Timeouts{Call: 300 * time.Millisecond}},
		gatewayconfig.Upstream{Name: "b", Kind: gatewayconfig.KindMCP, URL: a.url, Prefix: true, Contracts: contracts,
			Timeouts: gatewayconfig.Timeouts{Call: 300 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	d.Commit()
	reg, err := idem.NewRegistry(d.Operations...)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r, err := pipeline.New(reg, pipeline.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op    string
		bound time.Duration
	}{{"a.slow", 300 * time.Millisecond}, {"b.slow", 900 * time.Millisecond}} {
		start := time.Now()
		res := r.Call(t.Context(), idem.Invocation{Operation: tc.op, Surface: idem.SurfaceHTTP,
			Principal: idem.Principal{Org: "o", ID: "agent", Kind: idem.KindAgent}, Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{}`)}})
		if res.Problem == nil || res.Problem.Code != idem.CodeTimeout || !strings.Contains(res.Problem.Detail, "timeout of "+tc.bound.String()) {
			t.Fatalf("%s: %d %s", tc.op, res.Status, res.Body())
		}
		// A lower bound only: the call was not cut before its timeout.
		if took := time.Since(start); took < tc.bound {
			t.Errorf("%s ended after %s, before its timeout of %s", tc.op, took, tc.bound)
		}
	}
}

// Issue 34 (gateway.md "Not yet" 8): Build's warnings send the operator
// to --contracts for the one-upstream flags and to the upstream's
// contracts: file in a config.
func TestBuildWarningsNameTheContractsPlace(t *testing.T) {
	tools := []*mcp.Tool{{Name: "a.write", InputSchema: map[string]any{"type": "object"}}}
	for _, tc := range []struct {
		upstream, want string
	}{
		{"", "a.write; declare one in --contracts"},
		{"a", `a.write; declare one in the contracts: file of upstream "a"`},
	} {
		built, err := gateway.Build(tools, nil, noCall{}, gateway.Options{ConfigUpstream: tc.upstream})
		if err != nil {
			t.Fatal(err)
		}
		if w := strings.Join(built.Warnings, "\n"); !strings.Contains(w, tc.want) {
			t.Errorf("upstream %q: warnings %q, want %q", tc.upstream, w, tc.want)
		}
	}
}
