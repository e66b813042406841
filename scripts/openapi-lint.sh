#!/usr/bin/env bash
# The OpenAPI lint (docs/http.md): Redocly CLI's `recommended` ruleset, at a
# pinned version, over the committed snapshots of the two documents idem
# serves:
#
#   httpapi/testdata/openapi.demo.json   idem serve --demo's
#   proxy/testdata/openapi.proxy.json    idem proxy's, in front of proxy/testdata/upstream.json
#
# Go tests keep the snapshots current (TestOpenAPIDemoSnapshot,
# TestServedDocumentSnapshot fail on a stale one; rewrite them with
# `go test ./httpapi ./proxy -run Snapshot -update`). make test runs this
# on a full run. Any error or warning fails: the documents have none.
#
# The CLI is installed once, with npm, into a cache outside the repository
# (IDEM_REDOCLY_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/idem). Without a
# usable node and npm, or when the install fails, the lint is skipped with a
# note -- and fails when CI=true.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=2.77.0 # @redocly/cli; it needs node >=20.19 <21 or >=22.12
documents=(httpapi/testdata/openapi.demo.json proxy/testdata/openapi.proxy.json)

say() { printf 'openapi-lint.sh: %s\n' "$@" >&2; }
skip() {
	if [[ ${CI:-} == true ]]; then
		say "$1; CI=true, so the OpenAPI lint cannot be skipped"
		exit 1
	fi
	say "$1; skipping the OpenAPI lint (CI=true makes this a failure)"
	exit 0
}

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
	skip "node and npm are needed for @redocly/cli@$version and were not found on PATH"
node_ok=$(node -e 'const [a, b] = process.versions.node.split(".").map(Number);
	console.log((a === 20 && b >= 19) || a > 22 || (a === 22 && b >= 12) ? "yes" : "no")')
[[ $node_ok == yes ]] || skip "node $(node --version) is too old for @redocly/cli@$version (>=20.19 <21 or >=22.12)"

dir=${IDEM_REDOCLY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}/redocly-cli@$version
bin=$dir/node_modules/.bin/redocly
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1
if [[ ! -x $bin ]] || [[ $(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).version' "$dir/node_modules/@redocly/cli/package.json" 2>/dev/null) != "$version" ]]; then
	say "installing @redocly/cli@$version into $dir"
	mkdir -p "$dir"
	if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error "@redocly/cli@$version" >&2; then
		skip "npm could not install @redocly/cli@$version"
	fi
else
	say "using @redocly/cli@$version from $dir (installed there by an earlier run)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-openapi-lint.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The ruleset, whatever redocly.yaml a working directory may hold.
printf 'extends:\n  - recommended\n' >"$tmp/redocly.yaml"

errors=0 warnings=0
for doc in "${documents[@]}"; do
	rc=0
	"$bin" lint --config "$tmp/redocly.yaml" --format json "$doc" >"$tmp/out.json" 2>"$tmp/err.txt" || rc=$?
	if ! counts=$(node -e '
		const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		for (const p of r.problems) {
			const where = (p.location || []).map(l => l.pointer).join(", ");
			console.error(`${process.argv[2]}: ${p.severity} ${p.ruleId}: ${p.message} (${where})`);
		}
		console.log(`${r.totals.errors} ${r.totals.warnings}`);
	' "$tmp/out.json" "$doc"); then
		cat "$tmp/err.txt" >&2
		say "redocly lint $doc did not run (exit $rc; its output is above)"
		exit 1
	fi
	read -r e w <<<"$counts"
	errors=$((errors + e)) warnings=$((warnings + w))
done
say "@redocly/cli@$version recommended: $errors errors, $warnings warnings in ${documents[*]}"
if ((errors + warnings > 0)); then
	say "fix the documents' problems above (then go test ./httpapi ./proxy -run Snapshot -update)"
	exit 1
fi
