package gatewayconfig

import (
	"maps"
	"slices"
	"strings"
)

// inherited are the variables a spawned upstream gets from the gateway's
// environment: the TypeScript SDK's stdio client's default (HOME,
// LOGNAME, PATH, SHELL, TERM, USER) with the locale (LANG, LC_*) and
// TMPDIR. Nothing else of the gateway's environment reaches it, idem's
// own IDEM_* least of all.
var inherited = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR"}

// Environ is the whole environment of the spawned upstream u, from the
// gateway's environment parent (os.Environ()): the allow-list, then u's
// Env, which wins. A value that starts with "()" (a shell function) is
// not inherited, as the TypeScript SDK does not.
func (u Upstream) Environ(parent []string) []string {
	env := map[string]string{}
	for _, kv := range parent {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || strings.HasPrefix(value, "()") {
			continue
		}
		if slices.Contains(inherited, name) || strings.HasPrefix(name, "LC_") {
			env[name] = value
		}
	}
	maps.Copy(env, u.Env)
	out := make([]string, 0, len(env))
	for _, name := range slices.Sorted(maps.Keys(env)) {
		out = append(out, name+"="+env[name])
	}
	return out
}
