package gatewayconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

const full = `upstreams:
  - name: memory
    command: npx
    args: ["-y", "@modelcontextprotocol/server-memory@2026.8.31"]
    env: {MEMORY_FILE_PATH: /var/lib/memory.jsonl, API_KEY: "${MEMORY_KEY}"}
    contracts: memory-contracts.yaml
  - name: tickets
    url: https://tickets.internal/mcp
    headers: {Authorization: "Bearer ${TICKETS_TOKEN}", X-Key: "file:key.txt"}
    include: ["create_*", "get_*"]
    exclude: ["*_admin"]
    timeouts: {connect: 10s, call: 60s}
  - name: billing
    openapi: billing-openapi.json
    baseURL: http://billing.internal:8080
    contracts: /etc/billing-contracts.yaml
    prefix: false
policies: []
limits: []
`

func TestParseFull(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "key.txt"), []byte("file-secret-1\n"), 0o600)
	c, err := Parse([]byte(full), dir, env(map[string]string{"MEMORY_KEY": "mem-secret", "TICKETS_TOKEN": "tok-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Upstreams) != 3 {
		t.Fatalf("upstreams: %+v", c.Upstreams)
	}
	m, tk, b := c.Upstreams[0], c.Upstreams[1], c.Upstreams[2]
	if m.Kind != KindMCP || !slices.Equal(m.Command, []string{"npx", "-y", "@modelcontextprotocol/server-memory@2026.8.31"}) ||
		m.Env["API_KEY"] != "mem-secret" || m.Contracts != filepath.Join(dir, "memory-contracts.yaml") || !m.Prefix {
		t.Errorf("memory: %+v", m)
	}
	if tk.URL != "https://tickets.internal/mcp" || tk.Headers["Authorization"] != "Bearer tok-secret" || tk.Headers["X-Key"] != "file-secret-1" ||
		tk.Timeouts != (Timeouts{Connect: 10 * time.Second, Call: time.Minute}) {
		t.Errorf("tickets: %+v", tk)
	}
	if !tk.Serves("create_ticket") || tk.Serves("delete_ticket") || tk.Serves("create_admin") {
		t.Error("tickets' filters")
	}
	if b.Kind != KindOpenAPI || b.Prefix || b.OpenAPI != filepath.Join(dir, "billing-openapi.json") || b.Contracts != "/etc/billing-contracts.yaml" || !b.Validate {
		t.Errorf("billing: %+v", b)
	}
	if b.ServedName("refund") != "refund" || m.ServedName("read_graph") != "memory.read_graph" {
		t.Error("served names")
	}
	if c.Policies == nil || c.Limits == nil {
		t.Error("policies and limits are kept")
	}
	line := "dial with Bearer tok-secret and mem-secret and file-secret-1"
	if got := c.Redact(line); strings.Contains(got, "secret") {
		t.Errorf("Redact: %s", got)
	}
	if m.Fingerprint == "" || m.Fingerprint == tk.Fingerprint {
		t.Error("fingerprints")
	}
	again, _ := Parse([]byte(full), dir, env(map[string]string{"MEMORY_KEY": "mem-secret", "TICKETS_TOKEN": "tok-secret"}))
	if again.Upstreams[0].Fingerprint != m.Fingerprint {
		t.Error("the same file has the same fingerprints")
	}
	changed, _ := Parse([]byte(full), dir, env(map[string]string{"MEMORY_KEY": "mem-secret-2", "TICKETS_TOKEN": "tok-secret"}))
	if changed.Upstreams[0].Fingerprint == m.Fingerprint || changed.Upstreams[1].Fingerprint != tk.Fingerprint {
		t.Error("a changed credential changes its upstream's fingerprint only")
	}
}

// TestParseRefusals: every refusal names the upstream and the field.
func TestParseRefusals(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"empty", ``, "the file is empty"},
		{"no upstreams", `policies: []`, "upstreams: give at least one upstream"},
		{"zero upstreams", `upstreams: []`, "upstreams: give at least one upstream"},
		{"unknown top key", "upstream: []\n", `the file: unknown key "upstream"`},
		{"upstreams not a list", "upstreams: {a: 1}\n", "upstreams: want a list"},
		{"unknown key", "upstreams:\n  - name: a\n    comand: x\n", `upstreams[0] "a": unknown key "comand"`},
		{"no name", "upstreams:\n  - command: x\n", `upstreams[0]: name ""`},
		{"bad name", "upstreams:\n  - name: My_Server\n    command: x\n", `upstreams[0]: name "My_Server"`},
		{"duplicate name", "upstreams:\n  - {name: a, command: x}\n  - {name: a, command: y}\n", `upstreams[1]: name "a" is also the name of upstreams[0]`},
		{"no transport", "upstreams:\n  - name: a\n", `upstreams[0] "a": give one of command`},
		{"two transports", "upstreams:\n  - {name: a, command: x, url: 'http://h/mcp'}\n", `not command and url`},
		{"args with url", "upstreams:\n  - {name: a, url: 'http://h/mcp', args: [x]}\n", `upstreams[0] "a": args is not for an upstream given by url`},
		{"headers with command", "upstreams:\n  - {name: a, command: x, headers: {A: b}}\n", `upstreams[0] "a": headers is not for an upstream given by command`},
		{"credentials in a url", "upstreams:\n  - {name: a, url: 'http://me:pw@h/mcp'}\n", `upstreams[0] "a": url: http://me:xxxxx@h/mcp holds credentials`},
		{"not a url", "upstreams:\n  - {name: a, url: 'http://h:x/%zz'}\n", `upstreams[0] "a": url: not a URL`},
		{"bad url", "upstreams:\n  - {name: a, url: 'ftp://h'}\n", `upstreams[0] "a": url: "ftp://h" is not an http(s) URL`},
		{"empty command", "upstreams:\n  - {name: a, command: ' '}\n", `upstreams[0] "a": command is empty`},
		{"args not a list", "upstreams:\n  - {name: a, command: x, args: y}\n", `upstreams[0] "a": args: want a list`},
		{"unset variable", "upstreams:\n  - {name: a, url: 'http://h/mcp', headers: {Authorization: '${NOPE}'}}\n", `upstreams[0] "a": headers.Authorization: the variable NOPE of ${NOPE} is not set`},
		{"bad reference", "upstreams:\n  - {name: a, url: 'http://h/mcp', headers: {Authorization: '${A-B}'}}\n", `headers.Authorization: ${A-B} is not a variable reference`},
		{"missing file", "upstreams:\n  - {name: a, command: x, env: {K: 'file:nope.txt'}}\n", `upstreams[0] "a": env.K: read`},
		{"idem variable", "upstreams:\n  - {name: a, command: x, env: {IDEM_STORE: 'sqlite:x'}}\n", `env.IDEM_STORE: IDEM_STORE is one of idem's own variables`},
		{"bad header name", "upstreams:\n  - {name: a, url: 'http://h/mcp', headers: {'A B': c}}\n", `headers.A B is not a header name`},
		{"header line break", "upstreams:\n  - {name: a, url: 'http://h/mcp', headers: {A: \"b\\nc\"}}\n", `headers.A: the value holds a line break`},
		{"bad glob", "upstreams:\n  - {name: a, command: x, include: ['[a']}\n", `upstreams[0] "a": include: "[a" is not a glob`},
		{"bad timeout", "upstreams:\n  - {name: a, command: x, timeouts: {connect: soon}}\n", `upstreams[0] "a": timeouts.connect "soon"`},
		{"negative timeout", "upstreams:\n  - {name: a, command: x, timeouts: {call: -1s}}\n", `timeouts.call "-1s"`},
		{"unknown timeout", "upstreams:\n  - {name: a, command: x, timeouts: {read: 1s}}\n", `upstreams[0] "a": timeouts: unknown key "read"`},
		{"bad prefix", "upstreams:\n  - {name: a, command: x, prefix: no}\n", `upstreams[0] "a": prefix: "no": want true or false`},
		{"openapi without baseURL", "upstreams:\n  - {name: a, openapi: doc.json}\n", `upstreams[0] "a": an openapi upstream needs baseURL`},
		{"bad maxStoredResponse", "upstreams:\n  - {name: a, openapi: doc.json, baseURL: 'http://h', maxStoredResponse: 0}\n", `maxStoredResponse "0"`},
		{"alias", "upstreams:\n  - &u {name: a, command: x}\n  - *u\n", `anchors and aliases`},
		{"key twice", "upstreams:\n  - name: a\n    command: x\n    command: y\n", `key "command" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), t.TempDir(), env(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestErrorsNeverHoldSecrets: a refusal after a credential was resolved
// does not quote it.
func TestErrorsNeverHoldSecrets(t *testing.T) {
	_, err := Parse([]byte("upstreams:\n  - {name: a, url: 'http://h/mcp', headers: {Authorization: 'Bearer ${TOKEN}', 'B C': x}}\n"), t.TempDir(), env(map[string]string{"TOKEN": "hunter22"}))
	if err == nil || strings.Contains(err.Error(), "hunter22") {
		t.Fatalf("got %v", err)
	}
}

func TestEnviron(t *testing.T) {
	u := Upstream{Env: map[string]string{"MEMORY_FILE_PATH": "/m", "HOME": "/h2"}}
	got := u.Environ([]string{"PATH=/bin", "HOME=/h", "IDEM_STORE=postgres://u:pw@h/db", "IDEM_TOKENS_FILE=/t", "LC_ALL=C", "SECRET=x", "SHELL=() { :; }", "TMPDIR=/tmp", "USER=u"})
	want := []string{"HOME=/h2", "LC_ALL=C", "MEMORY_FILE_PATH=/m", "PATH=/bin", "TMPDIR=/tmp", "USER=u"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
