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
for t in "${targets[@]}"; do
	read -r name pkg <<<"$t"
	go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg"
done
