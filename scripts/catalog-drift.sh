#!/usr/bin/env bash
# The catalog drift check (docs/catalog-drift.md). It builds idem, serves the
# demo as the current code declares it (idem serve --demo on a throwaway
# SQLite file) and compares the catalog it serves with the committed snapshot
# cmd/idem/testdata/catalog.demo.json, using `idem catalog diff`:
#
#   scripts/catalog-drift.sh           check (make test runs it)
#   scripts/catalog-drift.sh --update  show the changes, then rewrite the snapshot
#
# Exit 1 when a demo contract widened -- or narrowed: a snapshot left behind
# would let a later change undo the narrowing unseen. Either way the fix is
# --update in the same change, so that review sees the snapshot's diff and
# the widening lines printed here go into the change's description. Neutral
# changes (wording) pass with a note. Exit 2 when the check cannot run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

snapshot=cmd/idem/testdata/catalog.demo.json
say() { printf 'catalog-drift.sh: %s\n' "$@" >&2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-drift.XXXXXX")
pid=""
cleanup() {
	local rc=$?
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || :
		wait "$pid" 2>/dev/null || :
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT INT TERM HUP

go build -v -o "$tmp/idem" ./cmd/idem # names each package it compiles, quiet when cached
"$tmp/idem" serve --demo --addr 127.0.0.1:0 --store "sqlite:$tmp/idem.db" \
	--secret-key-file "$tmp/idem.key" >/dev/null 2>"$tmp/serve.log" &
pid=$!
deadline=$((SECONDS + 30))
until grep -q '^listening on http://' "$tmp/serve.log"; do
	if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
		cat "$tmp/serve.log" >&2
		say "idem serve --demo did not start listening (its log is above)"
		exit 2
	fi
	sleep 0.1
done
base=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$tmp/serve.log" | head -n1)

if [[ ${1:-} == --update ]]; then
	"$tmp/idem" catalog diff "$snapshot" "$base/v1/operations" || :
	"$tmp/idem" operations list --server "$base" --format json >"$snapshot"
	say "rewrote $snapshot; commit it with the change and name its widening changes (above) in the description"
	exit 0
fi

rc=0
"$tmp/idem" catalog diff "$snapshot" "$base/v1/operations" >"$tmp/diff.txt" || rc=$?
cat "$tmp/diff.txt"
summary=$(tail -n1 "$tmp/diff.txt")
case $rc in
0) ;;
1)
	say "a demo contract WIDENED (above). If that is intended, say so: run scripts/catalog-drift.sh --update, commit $snapshot with the change and name the widening in its description (docs/catalog-drift.md)."
	exit 1
	;;
*) exit "$rc" ;;
esac
if [[ $summary =~ ^0\ widening,\ ([1-9][0-9]*)\ narrowing ]]; then
	say "${BASH_REMATCH[1]} demo contract change(s) narrowed (above): run scripts/catalog-drift.sh --update and commit $snapshot with the change, so that a later change cannot undo them unseen."
	exit 1
fi
if [[ $summary != "no changes" ]]; then
	say "only neutral changes (above); scripts/catalog-drift.sh --update refreshes $snapshot"
fi
