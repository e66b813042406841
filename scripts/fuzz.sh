#!/usr/bin/env bash
# Coverage-guided fuzzing of every input from outside, for a time each:
#
#   scripts/fuzz.sh [FUZZTIME]     e.g. scripts/fuzz.sh 60s (the default)
#
# make fuzz runs it with FUZZTIME (60s); scripts/test.sh (make test) runs it
# for 2s each after the tests pass. A failing input is written under the
# package's testdata/fuzz/ and fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fuzztime=${1:-60s}
# target package
targets=(
	"FuzzParseKeyHeader ."
	"FuzzTransform ./canonical/"
	"FuzzFingerprint ./canonical/"
	"FuzzValidate ./internal/schema/"
	"FuzzRequest ./httpapi/"
)
out=$(mktemp "${TMPDIR:-/tmp}/idem-fuzz.XXXXXX")
trap 'rm -f "$out"' EXIT
for t in "${targets[@]}"; do
	read -r name pkg <<<"$t"
	rc=0
	go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$out" || rc=$?
	((rc == 0)) && continue
	# Go before 1.27 may end a duration -fuzztime with a bare "context
	# deadline exceeded" failure: a race in the fuzzing coordinator's
	# shutdown (go.dev/issue/75804), no input of ours. Anything else --
	# a failing input written, a panic, a build error -- fails the run.
	if [[ $(grep -c '^--- FAIL' "$out") == 1 ]] && grep -qx '    context deadline exceeded' "$out" &&
		! grep -q 'Failing input written to' "$out"; then
		printf 'fuzz.sh: %s: only "context deadline exceeded" at the end of -fuzztime, no failing input: the fuzzing coordinator race of go.dev/issue/75804, not a finding\n' "$name" >&2
		continue
	fi
	exit "$rc"
done
