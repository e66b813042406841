package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gatewayPoliciesConfig is the config of TestGatewayConfigPolicies:
// server-memory (prefixed) and server-everything's echo (prefix: false),
// followed by rules (its policies: and limits: sections).
func gatewayPoliciesConfig(t *testing.T, dir, rules string) string {
	return fmt.Sprintf(`upstreams:
  - name: memory
    command: node
    args: [%q]
    env: {MEMORY_FILE_PATH: %q}
    contracts: contracts.yaml
  - name: everything
    command: node
    args: [%q, stdio]
    include: ["echo"]
    prefix: false
%s`, memoryServer(t), filepath.Join(dir, "memory.jsonl"), everythingServer(t), rules)
}

const (
	gatewayDenyRule = `policies:
  - name: no-forbidden-echo
    operations: ["echo"]
    when: 'operation.upstream == "everything" && args.message == "forbidden"'
    outcome: deny
    reason: "That message is not for echoing."
`
	gatewayLimit = `limits:
  - name: memory-writes
    per: principal
    operations: ["memory.*"]
    sideEffects: [write]
    rate: 1/s
    burst: 1
  - name: memory-lookups
    per: principal
    operations: ["memory.open_nodes"]
    rate: 1/h
    burst: 1
`
)

// TestGatewayConfigPolicies: the policies: and limits: of idem gateway
// --config (SPEC §8.1, §17.1) compile against the served names of two
// upstreams. A deny by args on the unprefixed upstream's tool, whose
// condition reads operation.upstream (the configured name, not one read
// from the served name), names its rule and never reaches the upstream;
// a limit on one upstream's writes answers 429 with Retry-After, and the
// same-key retry after it runs once; a reload of the same config does not
// refill a limit's bucket; a rewrite whose rule does not
// compile is refused whole, the running rules kept; a rewrite without the
// rule lets the call through, the gateway watching the file.
func TestGatewayConfigPolicies(t *testing.T) {
	dir := gatewayDir(t)
	file := filepath.Join(dir, "gateway.yaml")
	writeFile(t, file, gatewayPoliciesConfig(t, dir, gatewayDenyRule+gatewayLimit))
	g := startGatewayConfig(t, dir, "gateway.yaml", nil, "--config-check-interval", "100ms")

	echo := func(message string) reply {
		return g.do(t, "POST", "/tools/echo", gatewayToken, `{"message":"`+message+`"}`)
	}
	if r := echo("hello").want(t, 200, ""); !strings.Contains(toolText(t, r), "hello") {
		t.Fatalf("echo: %s", r.raw)
	}
	denied := echo("forbidden").want(t, 403, "POLICY_DENIED")
	if denied.get("details.rule") != "no-forbidden-echo" || !strings.Contains(denied.get("detail").(string), "That message is not for echoing.") {
		t.Fatalf("deny %s", denied.raw)
	}

	t.Run("a limit on one upstream's writes: 429 with Retry-After, the same-key retry runs once", func(t *testing.T) {
		create := func(key, name string) reply {
			return g.do(t, "POST", "/tools/memory.create_entities", gatewayToken,
				`{"entities":[{"name":"`+name+`","entityType":"t","observations":[]}]}`, "Idempotency-Key", key)
		}
		var limited reply
		var key string
		for i := 0; i < 10 && limited.status != 429; i++ {
			key = fmt.Sprintf("ent-%d", i)
			limited = create(key, key)
		}
		limited.want(t, 429, "RATE_LIMITED")
		if limited.get("details.limit") != "memory-writes" || limited.header.Get("Retry-After") != "1" {
			t.Fatalf("429 %v %s", limited.header, limited.raw)
		}
		g.do(t, "GET", "/v1/attempts/"+key, gatewayToken, "").want(t, 404, "NOT_FOUND")
		echo("not limited").want(t, 200, "") // the other upstream's tool
		// As a client honouring Retry-After does, wait, then retry the key.
		time.Sleep(time.Second)
		retried := create(key, key).want(t, 200, "")
		if strings.Contains(string(retried.raw), `"io.idem/replayed":true`) {
			t.Fatalf("the retry was a replay: %s", retried.raw)
		}
		graph := g.do(t, "POST", "/tools/memory.read_graph", gatewayToken, `{}`).want(t, 200, "")
		entities, _ := graph.get("structuredContent.entities").([]any)
		n := 0
		for _, e := range entities {
			if e.(map[string]any)["name"] == key {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("the limited key's entity is in the graph %d times; want 1: %s", n, graph.raw)
		}
	})

	t.Run("a reload does not refill a limit", func(t *testing.T) {
		open := func() reply {
			return g.do(t, "POST", "/tools/memory.open_nodes", gatewayToken, `{"names":["ent-0"]}`)
		}
		open().want(t, 200, "")
		open().want(t, 429, "RATE_LIMITED")
		reloads := strings.Count(g.logs(), `"msg":"reloaded","trigger":"SIGHUP"`)
		if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitLog(t, g, `"msg":"reloaded","trigger":"SIGHUP"`, reloads+1)
		if r := open(); r.status != 429 {
			t.Fatalf("after a reload of the same config: %d %s; want 429, the bucket kept", r.status, r.raw)
		}
	})

	t.Run("a rewrite whose rule does not compile is refused whole", func(t *testing.T) {
		writeFile(t, file, gatewayPoliciesConfig(t, dir, strings.Replace(gatewayDenyRule, `args.message == "forbidden"`, `args.message > 1`, 1)))
		waitLog(t, g, "the config file is refused and the running config and rules stay", 1)
		if !strings.Contains(g.logs(), `no-forbidden-echo`) {
			t.Fatalf("the refusal does not name the rule:\n%s", g.logs())
		}
		echo("forbidden").want(t, 403, "POLICY_DENIED")
	})

	t.Run("the rule removed from the file: the call is served", func(t *testing.T) {
		writeFile(t, file, gatewayPoliciesConfig(t, dir, gatewayLimit))
		waitFor(t, 30*time.Second, "the rewritten file reloaded", func() bool {
			return strings.Count(g.logs(), `"msg":"reloaded","trigger":"the config file changed"`) >= 1
		})
		if r := echo("forbidden").want(t, 200, ""); !strings.Contains(toolText(t, r), "forbidden") {
			t.Fatalf("echo after the rule was removed: %s", r.raw)
		}
	})
}

// TestGatewayConfigPoliciesOneSource: with --policies FILE, a config
// rewritten to carry rules of its own is refused whole on reload (two
// sources of rules), the running upstreams and --policies' rules kept.
func TestGatewayConfigPoliciesOneSource(t *testing.T) {
	dir := gatewayDir(t)
	file := filepath.Join(dir, "gateway.yaml")
	writeFile(t, file, gatewayPoliciesConfig(t, dir, ""))
	writeFile(t, filepath.Join(dir, "policies.yaml"), gatewayDenyRule)
	g := startGatewayConfig(t, dir, "gateway.yaml", nil, "--config-check-interval", "100ms", "--policies", "policies.yaml")
	echo := func(message string) reply {
		return g.do(t, "POST", "/tools/echo", gatewayToken, `{"message":"`+message+`"}`)
	}
	if r := echo("forbidden").want(t, 403, "POLICY_DENIED"); r.get("details.rule") != "no-forbidden-echo" {
		t.Fatalf("--policies' rule with --config: %s", r.raw)
	}
	writeFile(t, file, gatewayPoliciesConfig(t, dir, "policies:\n  - {name: allow-all, outcome: allow}\n"))
	waitLog(t, g, "are two sources of rules", 1)
	echo("forbidden").want(t, 403, "POLICY_DENIED")
	echo("hello").want(t, 200, "")
}
