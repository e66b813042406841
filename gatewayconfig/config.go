// Package gatewayconfig reads the file of idem gateway --config (SPEC
// §17.1; docs/gateway.md): the upstreams the gateway fronts, each an MCP
// server (spawned over stdio, or at a streamable HTTP URL) or an HTTP API
// described by an OpenAPI document, with its name, tool filters,
// timeouts and credentials; and the policies: and limits: sections
// (§8.1), kept as YAML for the package that reads them.
//
// Decoding is strict: an unknown key, a value of the wrong shape, a
// missing or contradictory field is refused with its place in the file
// (upstreams[1] "tickets": headers.Authorization) and its line. ${VAR}
// and file:PATH references in headers and env are resolved at load; the
// values they yield are secrets, which Config.Redact takes out of any
// text (every log line and error of the gateway goes through it).
package gatewayconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v4"
)

// MaxFileBytes bounds the config file.
const MaxFileBytes = 1 << 20

// Kind says what an upstream speaks.
type Kind string

const (
	// KindMCP is an MCP server, spawned (Command) or at URL.
	KindMCP Kind = "mcp"
	// KindOpenAPI is an HTTP API described by an OpenAPI document, as
	// idem proxy fronts one.
	KindOpenAPI Kind = "openapi"
)

// Config is one config file, read and checked.
type Config struct {
	Upstreams []Upstream
	// Policies and Limits are the §8.1 sections as written (nil when
	// absent), for the package that reads them.
	Policies, Limits *yaml.Node
	// secrets are the values references resolved to, longest first.
	secrets []string
}

// Upstream is one upstream of the gateway.
type Upstream struct {
	// Name is [a-z0-9-]+, unique: the prefix of its served names, and
	// what names an MCP upstream in its calls' fingerprints (SPEC §6.2).
	Name string
	// Anonymous marks the upstream of the one-upstream flags (idem gateway
	// --upstream…, idem proxy): its calls' fingerprints name it by its URL
	// or command instead of its name, so that two such gateways in front of
	// different servers on one store share no records, and its warnings
	// send contracts to --contracts rather than to a contracts: file.
	Anonymous bool
	Kind      Kind
	// Command is the program to spawn and its arguments (an MCP upstream
	// over stdio).
	Command []string
	// Env is the spawned program's environment besides the allow-list
	// (SafeEnv), references resolved.
	Env map[string]string
	// URL is an MCP upstream's streamable HTTP endpoint.
	URL string
	// Headers are sent with every request to URL (MCP) or to BaseURL
	// (OpenAPI), references resolved.
	Headers map[string]string
	// OpenAPI is an OpenAPI upstream's document: a file, a URL, or a path
	// on BaseURL (/openapi.json); BaseURL is where its calls go.
	OpenAPI, BaseURL string
	// Validate checks inputs against the document's schemas (OpenAPI;
	// true unless validate: false).
	Validate bool
	// MaxStoredResponse bounds an OpenAPI upstream's answer body in bytes
	// (0: proxy's default).
	MaxStoredResponse int64
	// Contracts is the §15 overlay file, keyed by the upstream's own
	// names ("" for none).
	Contracts string
	// Include and Exclude are globs (path.Match) on the upstream's tool
	// names: a tool is served when it matches an Include (or there are
	// none) and no Exclude.
	Include, Exclude []string
	Timeouts         Timeouts
	// Prefix: served names are "<name>.<tool>" and an OpenAPI upstream's
	// routes are under "/<name>" (true unless prefix: false).
	Prefix bool
	// Fingerprint names everything above: an upstream whose fingerprint
	// did not change across a reload is kept as it runs.
	Fingerprint string
}

// Timeouts bound an upstream's connection and each call (0: the
// defaults).
type Timeouts struct {
	Connect, Call time.Duration
}

// Serves says whether the filters let the upstream tool named name be
// served.
func (u Upstream) Serves(name string) bool {
	if len(u.Include) > 0 && !slices.ContainsFunc(u.Include, func(g string) bool { ok, _ := path.Match(g, name); return ok }) {
		return false
	}
	return !slices.ContainsFunc(u.Exclude, func(g string) bool { ok, _ := path.Match(g, name); return ok })
}

// ServedName is the name a tool (or operationId) of the upstream is
// served under.
func (u Upstream) ServedName(name string) string {
	if u.Prefix {
		return u.Name + "." + name
	}
	return name
}

// Redact takes every secret the references resolved to out of s.
func (c *Config) Redact(s string) string {
	if c == nil {
		return s
	}
	for _, v := range c.secrets {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// Secrets are the values Redact takes out.
func (c *Config) Secrets() []string { return slices.Clone(c.secrets) }

// AddSecret makes Redact take v out too (a credential given on the
// command line).
func (c *Config) AddSecret(v string) {
	if len(v) < minSecret || slices.Contains(c.secrets, v) {
		return
	}
	c.secrets = append(c.secrets, v)
	slices.SortFunc(c.secrets, func(a, b string) int { return len(b) - len(a) })
}

// minSecret is the shortest value Redact takes out: a shorter one would
// blank common letters of every line, and protects nothing.
const minSecret = 4

// Finish computes the fingerprints and checks what Load checks across
// upstreams (names unique). Load calls it; a Config built in code (the
// one-upstream flags) calls it too.
func (c *Config) Finish() error {
	if len(c.Upstreams) == 0 {
		return errors.New("upstreams: give at least one upstream")
	}
	seen := map[string]int{}
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		if !nameRule.MatchString(u.Name) {
			return fmt.Errorf("upstreams[%d]: name %q is not 1 to 64 of a-z, 0-9 and '-'", i, u.Name)
		}
		if j, dup := seen[u.Name]; dup {
			return fmt.Errorf("upstreams[%d]: name %q is also the name of upstreams[%d]: names are unique", i, u.Name, j)
		}
		seen[u.Name] = i
		u.Fingerprint = ""
		raw, _ := json.Marshal(u) // every field, the fingerprint's own empty
		sum := sha256.Sum256(raw)
		u.Fingerprint = hex.EncodeToString(sum[:12])
	}
	return nil
}

var nameRule = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// Load reads and checks the config file at file. getenv resolves ${VAR}
// (os.Getenv in the binary); relative paths (file:PATH, contracts, a
// document file) are relative to the file's directory.
func Load(file string, getenv func(string) string) (*Config, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gateway config %s: %w", file, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("gateway config %s: the file is over %d bytes", file, MaxFileBytes)
	}
	c, err := Parse(data, filepath.Dir(file), getenv)
	if err != nil {
		return nil, fmt.Errorf("gateway config %s: %w", file, err)
	}
	return c, nil
}

// Parse reads and checks a config; dir is where relative paths start.
func Parse(data []byte, dir string, getenv func(string) string) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, errors.New("the file is empty: give upstreams:")
	}
	root := doc.Content[0]
	p := parser{dir: dir, getenv: getenv, c: &Config{}}
	fields, err := p.mapping(root, "the file", "upstreams", "policies", "limits")
	if err != nil {
		return nil, err
	}
	p.c.Policies, p.c.Limits = fields["policies"], fields["limits"]
	ups := fields["upstreams"]
	if ups == nil {
		return nil, errors.New("upstreams: give at least one upstream")
	}
	if ups.Kind != yaml.SequenceNode {
		return nil, at(ups, "upstreams: want a list of upstreams")
	}
	for i, n := range ups.Content {
		u, err := p.upstream(i, n)
		if err != nil {
			return nil, err
		}
		p.c.Upstreams = append(p.c.Upstreams, u)
	}
	if err := p.c.Finish(); err != nil {
		return nil, err
	}
	return p.c, nil
}

type parser struct {
	dir    string
	getenv func(string) string
	c      *Config
}

// at is an error about node, with its line.
func at(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s (line %d)", fmt.Sprintf(format, args...), n.Line)
}

// mapping checks that n is a mapping of the known keys, each once, and
// returns their values.
func (p *parser) mapping(n *yaml.Node, where string, known ...string) (map[string]*yaml.Node, error) {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return nil, at(n, "%s: YAML anchors and aliases are not accepted", where)
	}
	if n.Kind != yaml.MappingNode {
		return nil, at(n, "%s: want a mapping of %s", where, strings.Join(known, ", "))
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind == yaml.AliasNode {
			return nil, at(v, "%s: %s: YAML anchors and aliases are not accepted", where, k.Value)
		}
		if known != nil && !slices.Contains(known, k.Value) {
			return nil, at(k, "%s: unknown key %q; the keys are %s", where, k.Value, strings.Join(known, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, at(k, "%s: key %q is given twice", where, k.Value)
		}
		out[k.Value] = v
	}
	return out, nil
}

// upstreamKeys are the keys of an upstream, in the order the docs give.
var upstreamKeys = []string{"name", "command", "args", "env", "url", "headers", "openapi", "baseURL", "validate",
	"maxStoredResponse", "contracts", "include", "exclude", "timeouts", "prefix"}

// keysOf are the keys each kind of upstream takes besides the common
// ones (name, contracts, include, exclude, timeouts, prefix).
var keysOf = map[string][]string{
	"command": {"command", "args", "env"},
	"url":     {"url", "headers"},
	"openapi": {"openapi", "baseURL", "headers", "validate", "maxStoredResponse"},
}

func (p *parser) upstream(i int, n *yaml.Node) (Upstream, error) {
	where := fmt.Sprintf("upstreams[%d]", i)
	if n.Kind == yaml.MappingNode {
		// Name the upstream in every error, its own keys' included.
		for j := 0; j+1 < len(n.Content); j += 2 {
			if k, v := n.Content[j], n.Content[j+1]; k.Value == "name" && v.Kind == yaml.ScalarNode && nameRule.MatchString(v.Value) {
				where = fmt.Sprintf("upstreams[%d] %q", i, v.Value)
			}
		}
	}
	fields, err := p.mapping(n, where, upstreamKeys...)
	if err != nil {
		return Upstream{}, err
	}
	u := Upstream{Prefix: true, Validate: true}
	if v := fields["name"]; v != nil {
		if u.Name, err = scalar(v, where+": name"); err != nil {
			return u, err
		}
	}
	if !nameRule.MatchString(u.Name) {
		node := n
		if v := fields["name"]; v != nil {
			node = v
		}
		return u, at(node, "%s: name %q: give each upstream a name of 1 to 64 of a-z, 0-9 and '-' (it prefixes its tools' names)", where, u.Name)
	}
	where = fmt.Sprintf("upstreams[%d] %q", i, u.Name)
	var given []string
	for _, k := range []string{"command", "url", "openapi"} {
		if fields[k] != nil {
			given = append(given, k)
		}
	}
	if len(given) != 1 {
		return u, at(n, "%s: give one of command (an MCP server spawned over stdio), url (an MCP server over streamable HTTP) or openapi (an HTTP API), not %s",
			where, orNone(given))
	}
	kind := given[0]
	for k := range fields {
		if common := slices.Contains([]string{"name", "contracts", "include", "exclude", "timeouts", "prefix"}, k); !common && !slices.Contains(keysOf[kind], k) {
			return u, at(fields[k], "%s: %s is not for an upstream given by %s", where, k, kind)
		}
	}
	switch kind {
	case "command":
		u.Kind = KindMCP
		cmd, err := scalar(fields["command"], where+": command")
		if err != nil {
			return u, err
		}
		if strings.TrimSpace(cmd) == "" {
			return u, at(fields["command"], "%s: command is empty", where)
		}
		args, err := list(fields["args"], where+": args")
		if err != nil {
			return u, err
		}
		u.Command = append([]string{cmd}, args...)
		if u.Env, err = p.refs(fields["env"], where, "env"); err != nil {
			return u, err
		}
		for name := range u.Env {
			if err := CheckEnvName(name); err != nil {
				return u, at(fields["env"], "%s: env.%s: %v", where, name, err)
			}
		}
	case "url":
		u.Kind = KindMCP
		if u.URL, err = httpURL(fields["url"], where+": url"); err != nil {
			return u, err
		}
	case "openapi":
		u.Kind = KindOpenAPI
		if u.OpenAPI, err = scalar(fields["openapi"], where+": openapi"); err != nil {
			return u, err
		}
		if strings.TrimSpace(u.OpenAPI) == "" {
			return u, at(fields["openapi"], "%s: openapi is empty: give the document's file, URL or path on baseURL", where)
		}
		if !strings.Contains(u.OpenAPI, "://") && !strings.HasPrefix(u.OpenAPI, "/") {
			// A file beside the config; an absolute path is a file, or
			// else a path on baseURL (/openapi.json), as idem proxy reads it.
			u.OpenAPI = filepath.Join(p.dir, u.OpenAPI)
		}
		if fields["baseURL"] == nil {
			return u, at(n, "%s: an openapi upstream needs baseURL, where its calls go", where)
		}
		if u.BaseURL, err = httpURL(fields["baseURL"], where+": baseURL"); err != nil {
			return u, err
		}
		if v := fields["validate"]; v != nil {
			if u.Validate, err = boolean(v, where+": validate"); err != nil {
				return u, err
			}
		}
		if v := fields["maxStoredResponse"]; v != nil {
			s, err := scalar(v, where+": maxStoredResponse")
			if err != nil {
				return u, err
			}
			if u.MaxStoredResponse, err = strconv.ParseInt(s, 10, 64); err != nil || u.MaxStoredResponse <= 0 {
				return u, at(v, "%s: maxStoredResponse %q: want a positive number of bytes", where, s)
			}
		}
	}
	if fields["headers"] != nil {
		if u.Headers, err = p.refs(fields["headers"], where, "headers"); err != nil {
			return u, err
		}
		for name, v := range u.Headers {
			if !headerName.MatchString(name) {
				return u, at(fields["headers"], "%s: headers.%s is not a header name", where, name)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return u, at(fields["headers"], "%s: headers.%s: the value holds a line break or NUL", where, name)
			}
			p.c.AddSecret(v)
		}
	}
	if v := fields["contracts"]; v != nil {
		if u.Contracts, err = scalar(v, where+": contracts"); err != nil {
			return u, err
		}
		if u.Contracts != "" && !filepath.IsAbs(u.Contracts) {
			u.Contracts = filepath.Join(p.dir, u.Contracts)
		}
	}
	for _, k := range []string{"include", "exclude"} {
		globs, err := list(fields[k], where+": "+k)
		if err != nil {
			return u, err
		}
		for _, g := range globs {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				return u, at(fields[k], "%s: %s: %q is not a glob (*, ?, [a-z] on tool names)", where, k, g)
			}
		}
		if k == "include" {
			u.Include = globs
		} else {
			u.Exclude = globs
		}
	}
	if v := fields["timeouts"]; v != nil {
		t, err := p.mapping(v, where+": timeouts", "connect", "call")
		if err != nil {
			return u, err
		}
		for k, dst := range map[string]*time.Duration{"connect": &u.Timeouts.Connect, "call": &u.Timeouts.Call} {
			if t[k] == nil {
				continue
			}
			s, err := scalar(t[k], where+": timeouts."+k)
			if err != nil {
				return u, err
			}
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return u, at(t[k], "%s: timeouts.%s %q: want a positive duration such as 10s", where, k, s)
			}
			*dst = d
		}
	}
	if v := fields["prefix"]; v != nil {
		if u.Prefix, err = boolean(v, where+": prefix"); err != nil {
			return u, err
		}
	}
	return u, nil
}

var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// CheckEnvName refuses a name no variable can have, and idem's own
// (IDEM_*): they hold idem's store and credentials, never an upstream's.
func CheckEnvName(name string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") {
		return fmt.Errorf("%q is not a variable name", name)
	}
	if strings.HasPrefix(strings.ToUpper(name), "IDEM_") {
		return fmt.Errorf("%s is one of idem's own variables (IDEM_*), which an upstream never gets", name)
	}
	return nil
}

// refs reads a mapping of strings (headers, env), resolving ${VAR} and
// file:PATH references; every value a reference yielded is a secret.
func (p *parser) refs(n *yaml.Node, where, field string) (map[string]string, error) {
	if n == nil {
		return nil, nil
	}
	fields, err := p.mapping(n, where+": "+field)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		raw, err := scalar(fields[k], where+": "+field+"."+k)
		if err != nil {
			return nil, err
		}
		v, ref, err := p.resolve(raw)
		if err != nil {
			return nil, at(fields[k], "%s: %s.%s: %v", where, field, k, err)
		}
		if ref {
			p.c.AddSecret(v)
		}
		out[k] = v
	}
	return out, nil
}

var varRef = regexp.MustCompile(`\$\{([^}]*)\}`)

// resolve is a value with its references read: file:PATH (the whole
// value: the file's content without its final line break), else each
// ${VAR} (a variable that is not set is an error: an empty credential
// is not what anyone meant). The errors name the reference, never a
// value.
func (p *parser) resolve(raw string) (string, bool, error) {
	if file, ok := strings.CutPrefix(raw, "file:"); ok {
		if file == "" {
			return "", true, errors.New("file: names no file")
		}
		if !filepath.IsAbs(file) {
			file = filepath.Join(p.dir, file)
		}
		f, err := os.Open(file)
		if err != nil {
			return "", true, fmt.Errorf("read %s: %w", file, errors.Unwrap(err))
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
		if err != nil {
			return "", true, fmt.Errorf("read %s: %w", file, err)
		}
		if len(data) > 64<<10 {
			return "", true, fmt.Errorf("%s is over 64 KiB: a credential file holds one value", file)
		}
		return strings.TrimRight(string(data), "\r\n"), true, nil
	}
	var missing error
	ref := false
	out := varRef.ReplaceAllStringFunc(raw, func(m string) string {
		ref = true
		name := m[2 : len(m)-1]
		v := ""
		if p.getenv != nil {
			v = p.getenv(name)
		}
		if !envName.MatchString(name) {
			missing = fmt.Errorf("${%s} is not a variable reference (letters, digits and _)", name)
		} else if v == "" && missing == nil {
			missing = fmt.Errorf("the variable %s of ${%s} is not set (or empty)", name, name)
		}
		p.c.AddSecret(v) // alone too: an upstream's error may quote the token without its "Bearer "
		return v
	})
	if missing != nil {
		return "", true, missing
	}
	return out, ref, nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func scalar(n *yaml.Node, where string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", at(n, "%s: want a single value", where)
	}
	return n.Value, nil
}

func boolean(n *yaml.Node, where string) (bool, error) {
	s, err := scalar(n, where)
	if err != nil {
		return false, err
	}
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, at(n, "%s: %q: want true or false", where, s)
}

func list(n *yaml.Node, where string) ([]string, error) {
	if n == nil {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, at(n, "%s: want a list", where)
	}
	var out []string
	for i, e := range n.Content {
		s, err := scalar(e, fmt.Sprintf("%s[%d]", where, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func httpURL(n *yaml.Node, where string) (string, error) {
	s, err := scalar(n, where)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", at(n, "%s: not a URL: give http(s)://host[:port]/path", where)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", at(n, "%s: %q is not an http(s) URL", where, u.Redacted())
	}
	if u.User != nil {
		return "", at(n, "%s: %s holds credentials: give them in headers (Authorization), where they are redacted", where, u.Redacted())
	}
	return s, nil
}

func orNone(given []string) string {
	if len(given) == 0 {
		return "none of them"
	}
	return strings.Join(given, " and ")
}
