package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem/internal/pgtest"
)

// buildGWUpstream builds e2e/testdata/gwupstream, the gateway tests' own
// MCP server.
func buildGWUpstream(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gwupstream")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/gwupstream").CombinedOutput(); err != nil {
		t.Fatalf("build gwupstream: %v\n%s", err, out)
	}
	return bin
}

// startGatewayConfigOn runs idem gateway --config config on store.
func startGatewayConfigOn(t *testing.T, dir, config, store string) *server {
	t.Helper()
	cmd := exec.Command(binary, "gateway", "--config", config, "--tokens-file", filepath.Join(dir, "tokens"),
		"--addr", "127.0.0.1:0", "--store", store, "--secret-key-file", filepath.Join(dir, "idem.key"), "--lease-grace", "1s")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=")
	return launch(t, cmd, "idem gateway --config "+config)
}

// recorderConfig is a config of one upstream, gwupstream named name and
// served unprefixed, its record tool same_key_replay, its effects counted
// in effects.
func recorderConfig(t *testing.T, dir, file, name, bin, effects string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "recorder.yaml"), "record:\n  kind: same_key_replay\n  reconcile: recorded\n  rationale: A note is recorded once per key.\n")
	writeFile(t, filepath.Join(dir, file), fmt.Sprintf(`upstreams:
  - name: %s
    command: %q
    env: {GWUPSTREAM_EFFECTS: %q}
    contracts: recorder.yaml
    include: [record, recorded]
    prefix: false
`, name, bin, effects))
}

// effectLines counts the effects gwupstream recorded in file.
func effectLines(t *testing.T, file string) int {
	t.Helper()
	raw, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(raw), "\n")
}

// TestGatewayConfigTwoInstancesStorm runs two idem gateway --config
// processes, one config, on one PostgreSQL store, each spawning its own
// gwupstream (which counts its effects in one shared file): 120
// concurrent calls under one key, split across both gateways, over HTTP
// and over MCP, make exactly one upstream effect, and every answer is
// that result, a replay of it, or 409 in flight. The same key with other
// arguments is 422 on both. A third gateway on the same store, in front
// of another upstream (named beta) serving the same tool under the same
// name, does not replay alpha's record: the same key there is 422
// (records are scoped mcp:<name>) and beta runs nothing.
func TestGatewayConfigTwoInstancesStorm(t *testing.T) {
	dir := gatewayDir(t)
	bin := buildGWUpstream(t)
	store := pgtest.NewDatabase(t)
	alphaEffects := filepath.Join(dir, "alpha.effects")
	recorderConfig(t, dir, "alpha.yaml", "alpha", bin, alphaEffects)
	a := startGatewayConfigOn(t, dir, "alpha.yaml", store)
	b := startGatewayConfigOn(t, dir, "alpha.yaml", store)
	t.Logf("two gateways on one PostgreSQL: %s and %s", a.url, b.url)
	csA, csB := mcpHTTP(t, a, gatewayToken), mcpHTTP(t, b, gatewayToken)

	const calls = 120
	body := `{"note":"storm"}`
	type answer struct {
		via      string
		status   int    // HTTP status; over MCP 200, or the problem's status
		code     string // the problem's code, if any
		exe      string
		replayed bool
		text     string // the result's text
		err      error
	}
	answers := make(chan answer, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, cs := a, csA
			if i%2 == 1 {
				g, cs = b, csB
			}
			name := []string{"a", "b"}[i%2]
			if i%4 < 2 {
				r, err := g.try("POST", "/tools/record", gatewayToken, body, "Idempotency-Key", "storm-1", "Prefer", "wait=30")
				ans := answer{via: "HTTP " + name, status: r.status, err: err, exe: r.header.Get("Idem-Execution-Id"), replayed: r.header.Get("Idempotent-Replayed") == "true"}
				if code, ok := r.body["code"].(string); ok {
					ans.code = code
				} else if err == nil && r.status == 200 {
					ans.text = toolText(t, r)
				}
				answers <- ans
				return
			}
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "record", Arguments: map[string]any{"note": "storm", "idempotencyKey": "storm-1"}})
			ans := answer{via: "MCP " + name, err: err, status: 200}
			if err == nil {
				ans.exe, _ = res.Meta["io.idem/executionId"].(string)
				ans.replayed, _ = res.Meta["io.idem/replayed"].(bool)
				if res.IsError {
					p, _ := idemProblem(res).(map[string]any)
					ans.code, _ = p["code"].(string)
					if s, ok := p["status"].(float64); ok {
						ans.status = int(s)
					}
				} else if len(res.Content) > 0 {
					if tc, ok := res.Content[0].(*mcp.TextContent); ok {
						ans.text = tc.Text
					}
				}
			}
			answers <- ans
		}()
	}
	wg.Wait()
	close(answers)
	var result *answer
	tally := map[string]int{}
	for ans := range answers {
		switch {
		case ans.err != nil:
			t.Fatalf("%s: %v", ans.via, ans.err)
		case ans.status == 409 && ans.code == "IDEMPOTENCY_KEY_IN_FLIGHT":
			tally[ans.via+" 409 in flight"]++
			continue
		case ans.status != 200 || ans.code != "" || !strings.HasPrefix(ans.text, `recorded "storm"`):
			t.Fatalf("%s: %d %s %q", ans.via, ans.status, ans.code, ans.text)
		}
		if ans.replayed {
			tally[ans.via+" replayed"]++
		} else {
			tally[ans.via+" ran"]++
		}
		if result == nil {
			result = &ans
		}
		if ans.exe != result.exe || ans.text != result.text {
			t.Fatalf("two results: %s %s %q and %s %s %q", result.via, result.exe, result.text, ans.via, ans.exe, ans.text)
		}
	}
	t.Logf("answers: %v", tally)
	if result == nil {
		t.Fatal("no call answered the result")
	}
	if n := effectLines(t, alphaEffects); n != 1 {
		t.Fatalf("the upstream recorded %d effects, want 1", n)
	}
	ran := 0
	for via, n := range tally {
		if strings.HasSuffix(via, " ran") {
			ran += n
		}
	}
	if ran != 1 {
		t.Fatalf("%d answers say they ran the call, want 1: %v", ran, tally)
	}

	// The same key with other arguments, on either gateway, either surface.
	a.do(t, "POST", "/tools/record", gatewayToken, `{"note":"other"}`, "Idempotency-Key", "storm-1").want(t, 422, "IDEMPOTENCY_KEY_REUSED")
	res := mcpCall(t, csB, &mcp.CallToolParams{Name: "record", Arguments: map[string]any{"note": "other", "idempotencyKey": "storm-1"}})
	if p, _ := idemProblem(res).(map[string]any); !res.IsError || p["code"] != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("the same key with other arguments over MCP: %s", resultJSON(res))
	}
	again := b.do(t, "POST", "/tools/record", gatewayToken, body, "Idempotency-Key", "storm-1").want(t, 200, "")
	if again.header.Get("Idempotent-Replayed") != "true" || toolText(t, again) != result.text {
		t.Fatalf("the replay after the storm: %v %s", again.header, again.raw)
	}

	// Another upstream, the same tool under the same name, on the same store.
	betaEffects := filepath.Join(dir, "beta.effects")
	recorderConfig(t, dir, "beta.yaml", "beta", bin, betaEffects)
	c := startGatewayConfigOn(t, dir, "beta.yaml", store)
	c.do(t, "POST", "/tools/record", gatewayToken, body, "Idempotency-Key", "storm-1").want(t, 422, "IDEMPOTENCY_KEY_REUSED")
	if n := effectLines(t, betaEffects); n != 0 {
		t.Fatalf("beta recorded %d effects under alpha's key", n)
	}
	c.do(t, "POST", "/tools/record", gatewayToken, body, "Idempotency-Key", "beta-1").want(t, 200, "")
	if n, m := effectLines(t, betaEffects), effectLines(t, alphaEffects); n != 1 || m != 1 {
		t.Fatalf("effects after beta's own key: beta %d, alpha %d; want 1 and 1", n, m)
	}
}
